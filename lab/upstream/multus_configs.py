"""What the upstream lab writes for Multus and Whereabouts (pure rendering, no I/O).

The files, permissions and Pods :mod:`~dmn.lab.upstream.multus` installs: Multus' CNI
configuration (thin plugin, the lab's primary conflist as its cluster network, every path
below the lab directory), Whereabouts' configuration file, the two programs' RBAC, the
control loop's Pod, and the NetworkAttachmentDefinition and network-status shapes tests
use. Facts these follow: Multus v4.3.0 ``pkg/types`` and ``pkg/k8sclient`` (which fields
it reads, which API calls it makes), Whereabouts v0.9.2 ``pkg/config`` (where it looks for
its configuration file), ``pkg/controlloop`` and ``pkg/storage/kubernetes``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.api.cluster.resources import Resource
from dmn.lab.upstream import build, images
from dmn.lab.upstream.configs import NODE_IP, PRIMARY_CONFLIST, Layout

NETWORK_ATTACHMENT_DEFINITIONS = Resource(
    "k8s.cni.cncf.io",
    "v1",
    "network-attachment-definitions",
    "NetworkAttachmentDefinition",
    True,
)
WHEREABOUTS_IP_POOLS = Resource("whereabouts.cni.cncf.io", "v1alpha1", "ippools", "IPPool", True)
OVERLAPPING_RESERVATIONS = Resource(
    "whereabouts.cni.cncf.io",
    "v1alpha1",
    "overlappingrangeipreservations",
    "OverlappingRangeIPReservation",
    True,
)
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
#: where the programs' service accounts live and Whereabouts keeps its pools and leases
SYSTEM_NAMESPACE = "kube-system"
MULTUS_SA = "multus"
WHEREABOUTS_SA = "whereabouts"
MULTUS_CONFLIST = "00-multus.conflist"
MULTUS_NETWORK = "multus-cni-network"
#: the primary network's CNI name (``configs.cni_conflist``): Multus reports it as default
PRIMARY_NETWORK = "dmn-lab"
CONTROL_LOOP_POD = "whereabouts-ip-control-loop"
PROBE_POD = "multus-probe"
PROBE_NAMESPACE = "default"
#: Whereabouts' reconciler schedule (required: the control loop exits without one); once a
#: day, as Whereabouts' own default, so it does not run during a test
RECONCILER_CRON = "30 4 * * *"
TOKEN_SECONDS = 7 * 86400
MULTUS_BINARIES = ("multus", "multus-daemon", "multus-shim")
#: how Multus runs: ``thin`` (the ``multus`` plugin reads the API server at each ADD) or
#: ``thick`` (``multus-shim`` forwards each call to ``multus-daemon``, whose informers cache
#: Pods and NetworkAttachmentDefinitions)
MODES = ("thin", "thick")
DAEMON_PROCESS = "multus-daemon"
#: where a process in a Pod finds its service account; multus-daemon's client reads only this
#: (``rest.InClusterConfig``), so the lab binds a directory of its own there
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
WHEREABOUTS_BINARIES = ("whereabouts", "ip-control-loop")


@dataclass(frozen=True)
class MultusPaths:
    """Where the lab keeps Multus' and Whereabouts' files, all below the lab directory."""

    layout: Layout

    @property
    def conflist(self) -> Path:
        return self.layout.cni_conf / MULTUS_CONFLIST

    @property
    def primary(self) -> Path:
        return self.layout.cni_conf / PRIMARY_CONFLIST

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig("multus")

    @property
    def cache(self) -> Path:
        """Multus' ``cniDir``: its record of each sandbox's delegates, read at DEL."""
        return self.layout.root / "cni" / "multus"

    @property
    def conf_dir(self) -> Path:
        """Multus' ``confDir`` (networks named by CNI name; the lab names none there)."""
        return self.layout.root / "cni" / "multus.d"

    @property
    def whereabouts(self) -> Path:
        return self.layout.root / "whereabouts"

    @property
    def whereabouts_conf(self) -> Path:
        """The CNI binary's configuration file (``ipam.configuration_path``)."""
        return self.whereabouts / "whereabouts.conf"

    @property
    def whereabouts_kubeconfig(self) -> Path:
        return self.whereabouts / "whereabouts.kubeconfig"

    @property
    def control_loop(self) -> Path:
        """The control loop Pod's configuration directory (mounted where it looks)."""
        return self.whereabouts / "control-loop"

    @property
    def logs(self) -> Path:
        return self.layout.root / "logs"

    @property
    def thick(self) -> Path:
        """Thick mode's own files: daemon configuration, its service account directory."""
        return self.layout.root / "multus-thick"

    @property
    def daemon_config(self) -> Path:
        return self.thick / "daemon-config.json"

    @property
    def daemon_socket_dir(self) -> Path:
        """The shim's and the daemon's socket directory (the daemon empties it at start)."""
        return self.thick / "run"

    @property
    def daemon_primary(self) -> Path:
        """The daemon's ``multusAutoconfigDir``: a copy of the lab's primary conflist that
        its configuration manager reads (and watches) to generate a conflist of its own."""
        return self.thick / "primary"

    @property
    def daemon_copy_dir(self) -> Path:
        """The daemon's ``cniConfigDir``, where it writes the conflist it generates (and
        removes it when it stops): not containerd's directory — the lab writes the
        conflist containerd uses itself, atomically."""
        return self.thick / "net.d"

    @property
    def service_account(self) -> Path:
        """Bound at :data:`SERVICE_ACCOUNT_DIR` in the daemon's mount namespace."""
        return self.thick / "serviceaccount"


# --- what is written (pure) --------------------------------------------------------------


def multus_conflist(paths: MultusPaths, primary: str) -> str:
    """Multus' CNI configuration: thin plugin, the lab's primary conflist (its text,
    ``primary``) as its one delegate — every Pod's default network —, every path below the
    lab directory, logs to a file (not stderr, which containerd would copy into its own
    log).

    The primary is given inline (``delegates``), not as ``clusterNetwork`` naming its file:
    Multus v4.3.0 keeps a conflist loaded from a ``.conflist`` path as a re-serialization
    with only the generic CNI fields (``types.LoadDelegateNetConfFromConfList``) and runs DEL
    from that, so the bridge plugin's DEL lost its bridge and IPAM ranges and failed (``no IP
    ranges specified``), and every Pod stayed Terminating. An inline delegate keeps its
    exact bytes for ADD and DEL."""
    doc = {
        "cniVersion": "1.0.0",
        "name": MULTUS_NETWORK,
        "plugins": [
            {
                "type": "multus",
                "kubeconfig": str(paths.kubeconfig),
                **_multus_options(paths, primary, "multus.log"),
            }
        ],
    }
    return json.dumps(doc, indent=2)


def _multus_options(paths: MultusPaths, primary: str, log_name: str) -> dict[str, Any]:
    return {
        "delegates": [json.loads(primary)],
        "binDir": str(paths.layout.cni_bin),
        "cniDir": str(paths.cache),
        "confDir": str(paths.conf_dir),
        "logFile": str(paths.logs / log_name),
        "logLevel": "verbose",
        "logToStderr": False,
    }


def shim_conflist(paths: MultusPaths) -> str:
    """Thick mode's CNI configuration: ``multus-shim`` only sends containerd's call (its
    environment and this configuration) to the daemon's socket and returns its answer."""
    doc = {
        "cniVersion": "1.0.0",
        "name": MULTUS_NETWORK,
        "plugins": [
            {
                "type": "multus-shim",
                "daemonSocketDir": str(paths.daemon_socket_dir),
                "logFile": str(paths.logs / "multus-shim.log"),
                "logLevel": "verbose",
                "logToStderr": False,
            }
        ],
    }
    return json.dumps(doc, indent=2)


def daemon_config(paths: MultusPaths, primary: str) -> str:
    """``multus-daemon``'s one configuration file (v4.3.0 ``cmd/multus-daemon``,
    ``pkg/server`` and ``pkg/server/config``). The daemon reads its server settings from it
    (``socketDir``, log) and lays every key of the file over the configuration each CNI
    call brings — so the delegates, directories and log here are what an ADD runs with,
    the same as the thin plugin's (:func:`multus_conflist`). ``multusConfigFile`` must be
    ``auto``: with a file named there the daemon copies it and then exits at once (its
    main waits only for the configuration manager, which ``auto`` starts); so the manager
    runs, reading the primary conflist from :attr:`MultusPaths.daemon_primary` and writing
    its generated conflist into :attr:`MultusPaths.daemon_copy_dir`, which no runtime
    reads."""
    doc = {
        "cniVersion": json.loads(primary)["cniVersion"],
        "socketDir": str(paths.daemon_socket_dir),
        "multusConfigFile": "auto",
        "multusAutoconfigDir": str(paths.daemon_primary),
        "multusMasterCNI": PRIMARY_CONFLIST,
        "cniConfigDir": str(paths.daemon_copy_dir),
        **_multus_options(paths, primary, "multus-daemon.log"),
        # debug: only then does the daemon log where each ADD read the Pod from
        "logLevel": "debug",
    }
    return json.dumps(doc, indent=2)


def whereabouts_conf(kubeconfig_path: Path, log_file: Path | None) -> str:
    """Whereabouts' configuration file: the kubernetes datastore through ``kubeconfig_path``,
    the reconciler's schedule, and (for the CNI binary) its log file."""
    doc: dict[str, Any] = {
        "datastore": "kubernetes",
        "kubernetes": {"kubeconfig": str(kubeconfig_path)},
        "reconciler_cron_expression": RECONCILER_CRON,
    }
    if log_file is not None:
        doc.update(log_file=str(log_file), log_level="verbose")
    return json.dumps(doc, indent=2)


def _cluster_role(name: str, rules: list[dict[str, Any]], sa: str) -> list[dict[str, Any]]:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": SYSTEM_NAMESPACE}],
    }
    return [role, binding]


EVENT_RULE = {
    "apiGroups": ["", "events.k8s.io"],
    "resources": ["events"],
    "verbs": ["create", "patch", "update"],
}


def rbac() -> list[dict[str, Any]]:
    """What each program calls. Multus thin (v4.3.0): GET the Pod, GET each selected
    NetworkAttachmentDefinition, UPDATE ``pods/status`` with the network-status annotation
    (a read-modify-write retried on conflict), and Events; thick mode's daemon also lists
    and watches Pods and NetworkAttachmentDefinitions (its informers). Whereabouts (CNI binary and
    control loop share one account): its three kinds in full, a Lease per pool range
    (leader election around each allocation), Pods and NetworkAttachmentDefinitions read
    and watched, the Node read (the control loop checks its node exists), and Events."""
    nads = {
        "apiGroups": ["k8s.cni.cncf.io"],
        "resources": ["network-attachment-definitions"],
        "verbs": ["get", "list", "watch"],
    }
    multus = [
        nads,
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]},
        EVENT_RULE,
    ]
    whereabouts = [
        {
            "apiGroups": ["whereabouts.cni.cncf.io"],
            "resources": ["ippools", "overlappingrangeipreservations", "nodeslicepools"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        nads,
        {**EVENT_RULE, "verbs": ["create", "patch", "update", "get"]},
    ]
    accounts = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": sa, "namespace": SYSTEM_NAMESPACE},
        }
        for sa in (MULTUS_SA, WHEREABOUTS_SA)
    ]
    return [
        *accounts,
        *_cluster_role("dmn-lab-multus", multus, MULTUS_SA),
        *_cluster_role("dmn-lab-whereabouts", whereabouts, WHEREABOUTS_SA),
    ]


def whereabouts_image() -> str:
    return f"localhost/dmn-lab/whereabouts:{build.load_pins()['whereabouts']['version']}"


def control_loop_pod(paths: MultusPaths, image: str, apiserver_port: int) -> dict[str, Any]:
    """Whereabouts' reconciler as a Pod: host network (the lab's Pod network has no route
    out, and the loop must not depend on the CNI it serves), the in-cluster client pointed
    at the API server's node address (the lab runs no Service proxy), its configuration
    where it looks for it (``/host/etc/cni/net.d/whereabouts.d``)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": CONTROL_LOOP_POD,
            "namespace": SYSTEM_NAMESPACE,
            "labels": {"app": "whereabouts"},
        },
        "spec": {
            "hostNetwork": True,
            "serviceAccountName": WHEREABOUTS_SA,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "ip-control-loop",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "env": [
                        {
                            "name": "NODENAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        },
                        {"name": "WHEREABOUTS_NAMESPACE", "value": SYSTEM_NAMESPACE},
                        {"name": "KUBERNETES_SERVICE_HOST", "value": NODE_IP},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": str(apiserver_port)},
                    ],
                    "volumeMounts": [
                        {
                            "name": "config",
                            "mountPath": "/host/etc/cni/net.d/whereabouts.d",
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "config",
                    "hostPath": {"path": str(paths.control_loop), "type": "Directory"},
                }
            ],
        },
    }


def probe_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE_POD, "namespace": PROBE_NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": images.BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


def network_status(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Pod's network-status entries ([] when none is written or it does not parse)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        entries = json.loads(annotations.get(NETWORK_STATUS_ANNOTATION, "[]"))
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def network_attachment_definition(
    name: str,
    namespace: str,
    config: Mapping[str, Any] | str,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A NetworkAttachmentDefinition whose ``spec.config`` is ``config`` (a CNI
    configuration as a mapping, serialized, or as the exact JSON text to store)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = dict(annotations)
    text = config if isinstance(config, str) else json.dumps(config)
    return {
        "apiVersion": f"{NETWORK_ATTACHMENT_DEFINITIONS.group}/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": meta,
        "spec": {"config": text},
    }
