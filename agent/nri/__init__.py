"""NRI plugin side: connection multiplexer, ttrpc, and the plugin adapter over the coordinator.

Runtime configuration this plugin relies on (containerd 2.2+, ``/etc/containerd/config.toml``)
---------------------------------------------------------------------------------------------

NRI drops a plugin that times out or breaks the protocol and lets the Pod proceed, so an
absent or dropped plugin must not silently start workloads without their networks. The
runtime's default validator (containerd/nri ``plugins/default-validator``) enforces that
*per Pod*: it refuses CreateContainer while a plugin that the Pod's
``required-plugins.noderesource.dev/pod`` annotation lists is not registered (by name or as
``<index>-<name>``). The controller's Pod admission puts ``dra-multi-network`` there for
exactly the Pods that use our classes; no node-wide ``required_plugins`` is set, so Pods
without our claims never wait for this plugin::

    [plugins."io.containerd.nri.v1.nri"]
      disable = false
      socket_path = "/var/run/nri/nri.sock"
      plugin_registration_timeout = "5s"
      plugin_request_timeout = "2s"        # our per-hook deadline is 0.75 x this
      [plugins."io.containerd.nri.v1.nri".default_validator]
        enable = true
        tolerate_missing_plugins_annotation = "tolerate-missing-nri-plugins.noderesource.dev"

A sandbox the runtime started while the plugin was absent, dead or past containerd's
request timeout is attached by the agent at its first CreateContainer (the coordinator's
container gate); without the validator the agent fails closed only while it is connected.
"""
