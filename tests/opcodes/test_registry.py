"""The default registry holds exactly the design §3.6 vocabulary, and every spec obeys the
invariants the checker and runner rely on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dmn.opcodes.parameter_types import ParameterModel
from dmn.opcodes.predicates import POSTCONDITIONS, REQUIRES
from dmn.opcodes.registry import ALL_SPECS, default_registry
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)

VOCABULARY = {
    "linux/link-move/v1",
    "linux/link-configure/v1",
    "linux/create-macvlan/v1",
    "linux/create-ipvlan/v1",
    "linux/create-macvlan/v2",
    "linux/create-ipvlan/v2",
    "linux/create-vlan/v1",
    "linux/create-bond/v1",
    "linux/attach-master/v1",
    "share/hold-parent/v1",
    "pci/driver-bind/v1",
    "pci/function-reset/v1",
    "vfio/device-access/v1",
    "rdma/netns-assign/v1",
    "rdma/device-access/v1",
    "ib/port-configure/v1",
    "devlink/eswitch-configure/v1",
    "representor/configure/v1",
    "bridge/port-attach/v1",
    "bridge/port-vlan/v1",
    "bridge/shared-uplink-vlan/v1",
    "ovs/port-attach/v1",
    "sriov/vf-configure/v1",
    "sysctl/interface/v1",
    "ethtool/features/v1",
    "ip/addresses/v1",
    "ip/routes/v1",
    "ip/neighbours/v1",
    "ip/rules/v1",
    "ip/pool-addresses/v1",
    "ip/carried-host-config/v1",
    "multus/shadow-nad/v1",
    "multus/shadow-nad-shared/v1",
    "multus/pod-selection/v1",
    "multus/binding-ready/v1",
    "linux/host-link-state/v1",
}

P, C = Hook.PREPARE, Hook.CONNECT
REV, IRR, RED = Reversibility.REVERSIBLE, Reversibility.IRREVERSIBLE, Reversibility.REDISCOVER

#: The decided hook placement and reversibility of every opcode (see each family's docstring).
CONTRACT = {
    "linux/link-move/v1": ({C}, REV),
    "linux/link-configure/v1": ({C}, REV),
    "linux/host-link-state/v1": ({P}, REV),
    "linux/create-macvlan/v1": ({C}, REV),
    "linux/create-ipvlan/v1": ({C}, REV),
    "linux/create-macvlan/v2": ({C}, REV),
    "linux/create-ipvlan/v2": ({C}, REV),
    "linux/create-vlan/v1": ({C}, REV),
    "linux/create-bond/v1": ({C}, REV),
    "linux/attach-master/v1": ({C}, REV),
    "share/hold-parent/v1": ({P}, REV),
    "pci/driver-bind/v1": ({P}, RED),
    "pci/function-reset/v1": ({P}, IRR),
    "vfio/device-access/v1": ({C}, REV),
    "rdma/netns-assign/v1": ({C}, REV),
    "rdma/device-access/v1": ({C}, REV),
    "ib/port-configure/v1": ({C}, REV),
    "devlink/eswitch-configure/v1": ({P}, RED),
    "representor/configure/v1": ({P, C}, REV),
    "bridge/port-attach/v1": ({C}, REV),
    "bridge/port-vlan/v1": ({C}, REV),
    "bridge/shared-uplink-vlan/v1": ({C}, REV),
    "ovs/port-attach/v1": ({C}, REV),
    "sriov/vf-configure/v1": ({P}, REV),
    "sysctl/interface/v1": ({C}, REV),
    "ethtool/features/v1": ({C}, REV),
    "ip/addresses/v1": ({C}, REV),
    "ip/routes/v1": ({C}, REV),
    "ip/neighbours/v1": ({C}, REV),
    "ip/rules/v1": ({C}, REV),
    "ip/pool-addresses/v1": ({C}, REV),
    "ip/carried-host-config/v1": ({C}, REV),
    "multus/shadow-nad/v1": ({P}, REV),
    "multus/shadow-nad-shared/v1": ({P}, REV),
    "multus/pod-selection/v1": ({P}, REV),
    "multus/binding-ready/v1": ({P}, REV),
}

SPECS = sorted(ALL_SPECS, key=lambda s: s.name)
ids = [s.name for s in SPECS]


def test_registry_is_exactly_the_vocabulary() -> None:
    registry = default_registry()
    assert set(registry.names()) == VOCABULARY
    assert len(registry) == len(VOCABULARY)
    assert all(name in registry for name in VOCABULARY)
    assert registry.get("linux/create-vlan/v2") is None


def test_registry_is_cached() -> None:
    assert default_registry() is default_registry()


def test_contract_table_covers_every_opcode() -> None:
    assert set(CONTRACT) == VOCABULARY


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_hooks_and_reversibility(spec: OpcodeSpec) -> None:
    hooks, reversibility = CONTRACT[spec.name]
    assert spec.hooks == frozenset(hooks)
    assert spec.reversibility is reversibility


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_name_and_summary(spec: OpcodeSpec) -> None:
    family, verb, version = spec.name.split("/")
    assert spec.family == family and spec.version == version and version in ("v1", "v2")
    assert verb and verb == verb.lower()
    # the spec lives in its family's module
    assert spec.parameters.__module__ == f"dmn.opcodes.{family}.specs"
    assert "\n" not in spec.summary and spec.summary.endswith(".")
    assert 20 <= len(spec.summary) <= 100


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_parameter_model_is_strict(spec: OpcodeSpec) -> None:
    assert issubclass(spec.parameters, ParameterModel)
    config = spec.parameters.model_config
    assert config.get("extra") == "forbid"
    assert config.get("strict") is True
    assert spec.parameters.__doc__


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_predicates_are_registered(spec: OpcodeSpec) -> None:
    assert spec.requires <= set(REQUIRES)
    assert spec.postconditions <= set(POSTCONDITIONS)
    assert spec.postconditions, "every opcode must be observable after apply"


def test_every_registered_predicate_is_used() -> None:
    used_requires = set().union(*(s.requires for s in ALL_SPECS))
    used_post = set().union(*(s.postconditions for s in ALL_SPECS))
    assert set(REQUIRES) == used_requires
    assert set(POSTCONDITIONS) == used_post


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_recovery_contract(spec: OpcodeSpec) -> None:
    assert spec.hooks and spec.recovery
    # every opcode can be left for inspection
    assert RecoveryStrategy.QUARANTINE in spec.recovery
    if spec.reversibility is Reversibility.IRREVERSIBLE:
        # no inverse: never "restore", and a non-replaying way to observe the outcome
        assert RecoveryStrategy.RESTORE_BEFORE_IMAGE not in spec.recovery
        assert spec.recovery & {
            RecoveryStrategy.OBSERVE_AND_RECONCILE,
            RecoveryStrategy.REDISCOVER,
        }
    if spec.reversibility is Reversibility.REDISCOVER:
        assert RecoveryStrategy.REDISCOVER in spec.recovery


def test_irreversible_and_rediscover_opcodes_are_prepare_only() -> None:
    for spec in ALL_SPECS:
        if spec.reversibility is not Reversibility.REVERSIBLE:
            assert spec.hooks == frozenset({Hook.PREPARE}), spec.name


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_shared_parent_inputs_require_create_child_only(spec: OpcodeSpec) -> None:
    assert not spec.mutates_parent
    for port in spec.inputs.values():
        if port.type is HandleType.SHARED_PARENT:
            assert port.access is Access.CREATE_CHILD
    for port in spec.outputs.values():
        if port.type is HandleType.SHARED_PARENT:
            assert port.grants == frozenset({Access.CREATE_CHILD})


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_ports_are_well_formed(spec: OpcodeSpec) -> None:
    for port in spec.inputs.values():
        assert port.access is not None, "an input port names the access it needs"
        assert not port.grants and port.inherits is None
        assert 1 <= port.min_items <= port.max_items
    for port in spec.outputs.values():
        assert port.access is None
        assert port.grants, "an output states the accesses it carries at least"
        if port.inherits is not None:
            source = spec.inputs[port.inherits]
            assert source.type is port.type
    uses_sandbox = any(
        p.scope is ScopeKind.SANDBOX for p in (*spec.inputs.values(), *spec.outputs.values())
    )
    if uses_sandbox:
        assert spec.hooks == frozenset({Hook.CONNECT}), "a sandbox exists only in connect"


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_inherited_outputs_do_not_escalate(spec: OpcodeSpec) -> None:
    for port in spec.outputs.values():
        if port.inherits is None:
            continue
        source = spec.inputs[port.inherits]
        assert port.grants <= {Access.READ, source.access}


def test_connect_prepare_split() -> None:
    prepare_only = {s.name for s in ALL_SPECS if s.hooks == {Hook.PREPARE}}
    assert prepare_only == {
        "share/hold-parent/v1",
        "pci/driver-bind/v1",
        "pci/function-reset/v1",
        "devlink/eswitch-configure/v1",
        "sriov/vf-configure/v1",
        "multus/shadow-nad/v1",
        "multus/shadow-nad-shared/v1",
        "multus/pod-selection/v1",
        "multus/binding-ready/v1",
        "linux/host-link-state/v1",
    }


def test_specs_import_no_native_library() -> None:
    code = (
        "import sys; import dmn.opcodes.registry as r; r.default_registry(); "
        "bad = [m for m in ('pyroute2', 'ovs', 'pyudev', 'rocksdict', 'grpc', 'kubernetes') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
