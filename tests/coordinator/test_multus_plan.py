"""Multus automatic mode's plan at NodePrepare (``agent/coordinator/multus_plan.py``) against
the lab API server: the consumer verified, the template resolved, read and rendered for the
allocated device as the node knows it, names and interfaces, and every kind of bad input
refused with its reason — while nothing is written to the API server (the plan only reads;
every test compares the namespace's objects before and after)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.handles import FunctionFacts, LinkFacts, RdmaFacts, RepresentorFacts
from dmn.agent.coordinator.multus_plan import FINALIZER, managed, plan_bindings
from dmn.agent.coordinator.verify import DriverResult, Refusal, VerifiedClaim, VerifiedRoot
from dmn.agent.personas.model import Grant, Persona, PersonaSet
from dmn.api.cluster import Cluster, Forbidden, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.api.multus.resolution import TEMPLATE_ATTRIBUTE
from dmn.api.multus.selections import NETWORKS_ANNOTATION, merge_selections
from dmn.api.root_config import TopologyRootConfiguration
from dmn.interpreter.loader import load_builtin_plugins
from dmn.lab.apiserver import LabApiServer
from dmn.vocabulary.terms import Access, HandleType
from tests.fixtures.multus import nad, nad_crd

NODE = "node-a"
CONFIG = NodeConfig(node_name=NODE, node_uid="node-uid-a", state_dir=Path("/nonexistent"))
PLUGINS = load_builtin_plugins()
SHARE = (Grant(HandleType.SHARED_PARENT, frozenset({Access.CREATE_CHILD})),)
WHOLE = (Grant(HandleType.KERNEL_INTERFACE, frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE})),)

MACVLAN = {"cniVersion": "1.0.0", "name": "macvlan-net", "type": "macvlan", "mode": "bridge"}
HOST_DEVICE = {"cniVersion": "1.0.0", "name": "hd-net", "type": "host-device"}
SRIOV = {
    "cniVersion": "1.0.0",
    "name": "rail-a",
    "plugins": [
        {
            "type": "sriov",
            "vlan": 100,
            "ipam": {"type": "whereabouts", "range": "10.1.0.0/24", "network_name": "rail-a"},
        },
        {"type": "tuning", "mtu": 9000},
    ],
}


@dataclass
class Devices:
    """The node's trusted view of its devices (a fake of the inventory's)."""

    pci: str | None = None

    def personas(self) -> PersonaSet:
        return PersonaSet((), {}, ())

    def link(self, inventory_id: str) -> LinkFacts | None:
        return LinkFacts("eth9", "02:00:00:00:00:09")

    def function(self, inventory_id: str) -> FunctionFacts | None:
        return FunctionFacts(self.pci) if self.pci else None

    def rdma(self, inventory_id: str) -> tuple[RdmaFacts, ...]:
        return ()

    def representor(self, inventory_id: str) -> RepresentorFacts | None:
        return None


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as server, Cluster(connect(url=server.url)) as c:
        c.create(r.CUSTOM_RESOURCE_DEFINITIONS, nad_crd())
        yield c


@dataclass
class Case:
    cluster: Cluster
    namespace: str
    pod: dict[str, Any]
    claim: dict[str, Any]

    def template(self, name: str, config: Any, namespace: str = "") -> None:
        text = config if isinstance(config, str) else json.dumps(config)
        ns = namespace or self.namespace
        self.cluster.create(r.NETWORK_ATTACHMENT_DEFINITIONS, nad(ns, name, text), ns)

    def objects(self) -> Any:
        nads = self.cluster.list(r.NETWORK_ATTACHMENT_DEFINITIONS, self.namespace).items
        pod = self.cluster.get(r.PODS, self.pod["metadata"]["name"], self.namespace)
        return (
            sorted((o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in nads),
            pod["metadata"]["resourceVersion"],
        )


def case(
    cluster: Cluster,
    annotations: Mapping[str, str] | None = None,
    reserved: int = 1,
    **pod_spec: Any,
) -> Case:
    namespace = f"mp-{uuid.uuid4().hex[:8]}"
    cluster.create(r.NAMESPACES, {"metadata": {"name": namespace}})
    meta: dict[str, Any] = {"namespace": namespace, "name": "app"}
    if annotations:
        meta["annotations"] = dict(annotations)
    spec = {
        "nodeName": NODE,
        "containers": [{"name": "c", "image": "example.invalid/app:1"}],
        "resourceClaims": [{"name": "net", "resourceClaimName": "claim"}],
        **pod_spec,
    }
    pod = cluster.create(r.PODS, {"metadata": meta, "spec": spec}, namespace)
    claim = cluster.create(
        r.RESOURCE_CLAIMS,
        {
            "metadata": {"namespace": namespace, "name": "claim"},
            "spec": {
                "devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "x"}}]}
            },
        },
        namespace,
    )
    consumers = [{"resource": "pods", "name": "app", "uid": pod["metadata"]["uid"]}]
    consumers += [
        {"resource": "pods", "name": f"other{i}", "uid": str(uuid.uuid4())}
        for i in range(reserved - 1)
    ]
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "net", "driver": DRIVER, "pool": NODE, "device": "dev0"}]
            }
        },
        "reservedFor": consumers[:reserved],
    }
    claim = cluster.replace(r.RESOURCE_CLAIMS, claim, namespace, status=True)
    return Case(cluster, namespace, pod, claim)


def persona(grants: tuple[Grant, ...], attributes: Mapping[str, str] | None = None) -> Persona:
    shared = grants == SHARE
    return Persona(
        name="dev0",
        inventory_id="inv-dev0",
        persona="macvlan" if shared else "kernel",
        plugin="multus-cni-shared" if shared else "multus-cni",
        mode="shared" if shared else "kernel",
        link_type="ethernet",
        pci_address="",
        pf_pci_address="",
        rdma_capable=False,
        allocation_ready=True,
        policy="p",
        policy_digest="sha256:" + "0" * 64,
        allow_multiple_allocations=shared,
        children=None,
        consumptions=(),
        grants=grants,
        effect_permissions=(),
        extra_attributes=dict(attributes or {}),
    )


def root(
    c: Case,
    template: Mapping[str, str] | None,
    grants: tuple[Grant, ...] = SHARE,
    attributes: Mapping[str, str] | None = None,
    step: str = "net",
) -> VerifiedRoot:
    p = persona(grants, attributes)
    config: dict[str, Any] = {"mode": p.mode}
    if template is not None:
        config["template"] = dict(template)
    binding = TopologyRootConfiguration.model_validate(
        {
            "revisionRef": {"name": "rev", "uid": "rev-uid", "digest": "sha256:" + "1" * 64},
            "rootStep": step,
            "pluginContractDigest": PLUGINS[p.plugin].contract_digest,
        }
    )
    result = DriverResult("net", NODE, "dev0", "", {}, binding, 0)
    return VerifiedRoot(step, PLUGINS[p.plugin], config, result, p)


def verified(c: Case, *roots: VerifiedRoot) -> VerifiedClaim:
    uid = str(c.claim["metadata"]["uid"])
    return VerifiedClaim(uid, "fp", "rev", "rev-uid", "sha256:" + "1" * 64, roots)


def plan(c: Case, *roots: VerifiedRoot, devices: Devices | None = None) -> list[Any]:
    return plan_bindings(c.cluster, CONFIG, devices or Devices(), c.claim, verified(c, *roots))


def refused(c: Case, *roots: VerifiedRoot, devices: Devices | None = None) -> Refusal:
    before = c.objects()
    with pytest.raises(Refusal) as err:
        plan(c, *roots, devices=devices)
    assert c.objects() == before  # nothing changed in the API
    return err.value


def test_a_share_binds_the_macvlan_template_with_the_parent_as_master(cluster: Cluster) -> None:
    c = case(cluster, {NETWORKS_ANNOTATION: '[{"name":"user-net","interface":"net1"}]'})
    c.template("macvlan-net", MACVLAN)
    before = c.objects()
    (b,) = plan(c, root(c, {"name": "macvlan-net"}))
    assert c.objects() == before
    config = json.loads(b.nad["spec"]["config"])
    assert config == {**MACVLAN, "master": "eth9"}
    assert list(config)[:4] == [*list(MACVLAN)[:3], "master"]  # injected after type
    meta = b.nad["metadata"]
    assert meta["namespace"] == c.namespace and meta["name"].startswith("dmn-multus-")
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "app",
            "uid": c.pod["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }
    ]
    assert meta["finalizers"] == [FINALIZER]
    assert b.interface == "net2"  # net1 is the user's
    assert b.pod.uid == c.pod["metadata"]["uid"] and b.pod.node_name == NODE
    assert (b.selection.name, b.selection.interface) == (meta["name"], "net2")


def test_a_whole_link_goes_to_host_device_and_a_vf_to_sriov(cluster: Cluster) -> None:
    c = case(cluster)
    c.template("hd", HOST_DEVICE)
    (b,) = plan(c, root(c, {"name": "hd"}, WHOLE))
    assert json.loads(b.nad["spec"]["config"])["device"] == "eth9"
    c = case(cluster)
    c.template("rail-a", SRIOV)
    (b,) = plan(c, root(c, {"name": "rail-a"}, WHOLE), devices=Devices(pci="0000:03:00.1"))
    config = json.loads(b.nad["spec"]["config"])
    assert config["plugins"][0]["deviceID"] == "0000:03:00.1"
    assert config["plugins"][1] == {"type": "tuning", "mtu": 9000}  # not broadcast to it
    assert config["plugins"][0]["ipam"]["network_name"] == "rail-a"


def test_a_share_never_takes_a_device_whole(cluster: Cluster) -> None:
    c = case(cluster)
    c.template("hd", HOST_DEVICE)
    assert refused(c, root(c, {"name": "hd"}, SHARE)).code == "E_MULTUS_DEVICE_MISMATCH"
    c.template("rail-a", SRIOV)
    err = refused(c, root(c, {"name": "rail-a"}, SHARE), devices=Devices(pci="0000:03:00.1"))
    assert err.code == "E_MULTUS_DEVICE_MISMATCH"


def test_the_device_attribute_and_the_class_must_agree(cluster: Cluster) -> None:
    c = case(cluster)
    c.template("macvlan-net", MACVLAN)
    c.template("other-net", {**MACVLAN, "name": "other-net"}, namespace="default")
    attr = {TEMPLATE_ATTRIBUTE.rsplit("/", 1)[1]: "macvlan-net"}
    (b,) = plan(c, root(c, None, attributes=attr))  # the device alone names it
    assert b.selection.source_name == "macvlan-net"
    (b,) = plan(c, root(c, {"name": "macvlan-net"}, attributes=attr))  # both, agreeing
    err = refused(c, root(c, {"name": "other-net", "namespace": "default"}, attributes=attr))
    assert err.code == "E_MULTUS_TEMPLATE_CONFLICT"
    attr = {TEMPLATE_ATTRIBUTE.rsplit("/", 1)[1]: "a/b/c"}
    assert refused(c, root(c, {"name": "macvlan-net"}, attributes=attr)).code == (
        "E_MULTUS_TEMPLATE_INVALID"
    )


def test_a_missing_template_and_no_reference_are_refused(cluster: Cluster) -> None:
    c = case(cluster)
    assert refused(c, root(c, {"name": "absent"})).code == "E_MULTUS_TEMPLATE_MISSING"
    assert refused(c, root(c, None)).code == "E_MULTUS_TEMPLATE_MISSING"


@pytest.mark.parametrize(
    ("config", "code"),
    [
        ("[]", "E_MULTUS_TEMPLATE_INVALID"),  # an array
        ("null", "E_MULTUS_TEMPLATE_INVALID"),
        ('{"cniVersion":"1.0.0","type":"macvlan","type":"sriov"}', "E_MULTUS_TEMPLATE_INVALID"),
        (
            json.dumps({"cniVersion": "1.0.0", "plugins": [{"type": "sriov"}, {"type": "sriov"}]}),
            "E_MULTUS_TEMPLATE_UNSUPPORTED",
        ),
        (
            json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multus", "delegates": []}),
            "E_MULTUS_TEMPLATE_UNSUPPORTED",
        ),
        ('{"cniVersion":"1.0.0","type":"macvlan","mtu":1' + "0" * 400 + "}", None),
        ("", "E_MULTUS_TEMPLATE_UNSUPPORTED"),
    ],
    ids=["array", "null", "duplicate-type", "two-devices", "nested-multus", "huge-int", "empty"],
)
def test_malformed_templates_are_refused_before_any_change(
    cluster: Cluster, config: str, code: str | None
) -> None:
    c = case(cluster)
    c.template("bad", config)
    if code is None:  # a huge integer is kept exactly, not rounded through a float
        (b,) = plan(c, root(c, {"name": "bad"}))
        assert '"mtu":1' + "0" * 400 in b.nad["spec"]["config"]
        return
    assert refused(c, root(c, {"name": "bad"})).code == code


def test_a_template_the_node_may_not_read_is_forbidden(cluster: Cluster) -> None:
    class NoInfra(Cluster):
        def __init__(self, inner: Cluster) -> None:
            self.__dict__.update(inner.__dict__)
            self._inner = inner

        def get(self, res: r.Resource, name: str, namespace: str | None = None) -> Any:
            if res is r.NETWORK_ATTACHMENT_DEFINITIONS and namespace == "infra":
                raise Forbidden(403, "Forbidden", "the node may not get it in infra")
            return self._inner.get(res, name, namespace)

    c = case(cluster)
    with pytest.raises(Refusal) as err:
        plan_bindings(
            NoInfra(cluster),
            CONFIG,
            Devices(),
            c.claim,
            verified(c, root(c, {"name": "macvlan-net", "namespace": "infra"})),
        )
    assert err.value.code == "E_MULTUS_TEMPLATE_FORBIDDEN"


@pytest.mark.parametrize("problem", ["two-consumers", "host-network", "other-node", "terminating"])
def test_only_one_live_pod_on_this_node_is_a_consumer(cluster: Cluster, problem: str) -> None:
    if problem == "two-consumers":
        c = case(cluster, reserved=2)
    elif problem == "host-network":
        c = case(cluster, hostNetwork=True)
    elif problem == "other-node":
        c = case(cluster, nodeName="node-b")
    else:
        c = case(cluster)
        cluster.patch(
            r.PODS, "app", {"metadata": {"finalizers": ["example.com/hold"]}}, c.namespace
        )
        cluster.delete(r.PODS, "app", c.namespace)
    c.template("macvlan-net", MACVLAN)
    assert refused(c, root(c, {"name": "macvlan-net"})).code == "E_MULTUS_CONSUMER"
    if problem == "terminating":
        cluster.patch(r.PODS, "app", {"metadata": {"finalizers": None}}, c.namespace)


def test_a_replaced_pod_is_not_the_consumer(cluster: Cluster) -> None:
    c = case(cluster)
    c.template("macvlan-net", MACVLAN)
    c.claim["status"]["reservedFor"][0]["uid"] = str(uuid.uuid4())
    assert refused(c, root(c, {"name": "macvlan-net"})).code == "E_MULTUS_CONSUMER"


def test_a_pod_that_does_not_reference_the_claim_is_not_the_consumer(cluster: Cluster) -> None:
    c = case(cluster, resourceClaims=[{"name": "net", "resourceClaimName": "another"}])
    c.template("macvlan-net", MACVLAN)
    assert refused(c, root(c, {"name": "macvlan-net"})).code == "E_MULTUS_CONSUMER"


def test_a_manual_selection_of_the_template_is_refused(cluster: Cluster) -> None:
    c = case(cluster, {NETWORKS_ANNOTATION: "macvlan-net@eth5"})
    c.template("macvlan-net", MACVLAN)
    assert refused(c, root(c, {"name": "macvlan-net"})).code == "E_MULTUS_MANUAL_SELECTION"


def test_an_annotation_over_the_size_limit_is_refused(cluster: Cluster) -> None:
    c = case(cluster, {"example.com/big": "x" * (256 * 1024 - 200)})
    c.template("macvlan-net", MACVLAN)
    assert refused(c, root(c, {"name": "macvlan-net"})).code == "E_MULTUS_ANNOTATION_SIZE"


def test_a_foreign_object_under_the_shadow_name_is_refused_before_any_change(
    cluster: Cluster,
) -> None:
    c = case(cluster)
    c.template("macvlan-net", MACVLAN)
    (b,) = plan(c, root(c, {"name": "macvlan-net"}))
    foreign = nad(c.namespace, b.name, json.dumps(MACVLAN))
    cluster.create(r.NETWORK_ATTACHMENT_DEFINITIONS, foreign, c.namespace)
    assert refused(c, root(c, {"name": "macvlan-net"})).code == "E_MULTUS_SHADOW_CONFLICT"


def test_interfaces_skip_the_drivers_own_names_of_the_pod(cluster: Cluster) -> None:
    """A topology with a host-cni root (ifName net1, the driver's own path) and a multus
    root: Multus must not take net1, which the node creates later in RunPodSandbox."""
    c = case(cluster)
    c.template("macvlan-net", MACVLAN)
    own = replace(
        root(c, None, WHOLE, step="nic"),
        plugin=PLUGINS["host-cni"],
        config={"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True},
    )
    (b,) = plan(c, own, root(c, {"name": "macvlan-net"}))
    assert b.interface == "net2"


def test_the_same_inputs_give_the_same_plan(cluster: Cluster) -> None:
    c = case(cluster)
    c.template("macvlan-net", MACVLAN)
    first = plan(c, root(c, {"name": "macvlan-net"}))
    assert plan(c, root(c, {"name": "macvlan-net"})) == first


def test_a_binding_the_pod_already_records_keeps_its_interface(cluster: Cluster) -> None:
    """A retry after a crash that left the selection merged plans the same interface: the
    recorded one is not a name taken by someone else."""
    c = case(cluster)
    c.template("macvlan-net", MACVLAN)
    (b,) = plan(c, root(c, {"name": "macvlan-net"}))
    merged = merge_selections({}, [managed(b.selection)])
    assert merged is not None
    cluster.patch(r.PODS, "app", {"metadata": {"annotations": merged}}, c.namespace)
    assert plan(c, root(c, {"name": "macvlan-net"})) == [b]
