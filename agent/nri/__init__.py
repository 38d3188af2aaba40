"""NRI plugin side: connection multiplexer, ttrpc, and the plugin adapter over the coordinator.

Runtime configuration this plugin relies on (containerd 2.2+, ``/etc/containerd/config.toml``)
---------------------------------------------------------------------------------------------

NRI drops a plugin that times out or breaks the protocol and lets the Pod proceed, so an
absent or dropped plugin must not silently start workloads without their networks. The
runtime's default validator (containerd/nri ``plugins/default-validator``) enforces that:
with ``required_plugins`` set, every container adjustment is validated at CreateContainer
and fails while a listed plugin is not registered. The validator accepts the plugin by
name or as ``<index>-<name>`` (``GetPluginMap`` keys both)::

    [plugins."io.containerd.nri.v1.nri"]
      disable = false
      disable_connections = false          # the agent connects from its own Pod
      socket_path = "/var/run/nri/nri.sock"
      plugin_registration_timeout = "5s"
      plugin_request_timeout = "2s"        # our per-hook deadline is 0.75 x this
      [plugins."io.containerd.nri.v1.nri".default_validator]
        enable = true
        required_plugins = ["dra-multi-network"]
        tolerate_missing_plugins_annotation = "tolerate-missing-nri-plugins"

``required_plugins`` is node-wide: static and control-plane Pods (and the agent's own
DaemonSet Pod, which must start before the plugin can register) need the toleration
annotation set to ``"true"``, or they cannot start while the plugin is absent. Without the
validator the agent fails closed only while it is connected (design §5: the coordinator
refuses CreateContainer unless the exact sandbox is Ready).
"""
