"""Every builtin binds, per mode, to a concrete bound program with the real binder: guards
pick the mode's effects, ``forEach`` expands bond members, payloads re-validate against the
opcode parameter models, and bad configs or handles are refused before anything runs."""

from __future__ import annotations

from typing import Any

import pytest

from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram, EffectOutputRef
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.loader import Plugin, load_plugins
from dmn.opcodes.registry import default_registry
from dmn.programs import PROGRAMS_DIR
from dmn.vocabulary.handles import Handle, NamespaceIdentity, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

REGISTRY = default_registry()
SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(dev=4, inode=4026532999, boot_id="boot-1"))
HOST = Scope(ScopeKind.HOST)
EXCLUSIVE = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE})


def handle(
    hid: str,
    htype: HandleType,
    accesses: frozenset[Access],
    scope: Scope = HOST,
    link: LinkType | None = None,
) -> Handle:
    return Handle(
        id=hid,
        type=htype,
        inventory_id=f"inv-{hid}",
        scope=scope,
        accesses=accesses,
        link_type=link,
    )


NETDEV = handle("vf0", HandleType.KERNEL_INTERFACE, EXCLUSIVE, link=LinkType.ETHERNET)
IPOIB = handle("ib0", HandleType.KERNEL_INTERFACE, EXCLUSIVE, link=LinkType.INFINIBAND)
RDMA = handle("mlx5_3", HandleType.RDMA_DEVICE, EXCLUSIVE)
FUNCTION = handle("0000:3b:02.1", HandleType.PCI_FUNCTION, EXCLUSIVE)
VFIO_FUNCTION = handle("0000:3b:02.1", HandleType.PCI_FUNCTION, EXCLUSIVE | {Access.DEVICE_ACCESS})
REPRESENTOR = handle("pf0vf1", HandleType.HOST_REPRESENTOR, EXCLUSIVE)
PARENT = handle(
    "ens1f0", HandleType.KERNEL_INTERFACE, frozenset({Access.CREATE_CHILD}), link=LinkType.ETHERNET
)
SHARE = handle(
    "ens1f0-share-1",
    HandleType.SHARED_PARENT,
    frozenset({Access.CREATE_CHILD}),
    link=LinkType.ETHERNET,
)


SANDBOX_PARENT = handle(
    "vf9",
    HandleType.KERNEL_INTERFACE,
    frozenset({Access.READ, Access.CREATE_CHILD}),
    SANDBOX,
    LinkType.ETHERNET,
)


def member(i: int) -> Handle:
    return handle(
        f"vf{i}",
        HandleType.KERNEL_INTERFACE,
        frozenset({Access.READ, Access.ATTACH_MEMBER, Access.EXCLUSIVE_CONFIGURE}),
        SANDBOX,
        LinkType.ETHERNET,
    )


@pytest.fixture(scope="module")
def plugins() -> dict[str, Plugin]:
    loaded, diagnostics = load_plugins(PROGRAMS_DIR)
    assert diagnostics == []
    return loaded


def bound(result: BoundProgram | list[Diagnostic]) -> BoundProgram:
    assert isinstance(result, BoundProgram), [f"{d.code}: {d.path}: {d.message}" for d in result]
    return result


def codes(result: BoundProgram | list[Diagnostic]) -> set[Code]:
    assert not isinstance(result, BoundProgram), "expected the binder to refuse"
    return {d.code for d in result}


def kinds(program: BoundProgram) -> list[tuple[str, str]]:
    return [(e.id, e.kind) for e in program.effects]


KERNEL = {"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True}


@pytest.mark.parametrize("name", ["host-cni", "sriov-cni"])
def test_kernel_root(name: str, plugins: dict[str, Plugin]) -> None:
    plugin = plugins[name]
    prepare = bound(
        bind_program(plugin, "prepare", Call(config=KERNEL, allocation={"interface": (NETDEV,)}))
    )
    assert prepare.effects == ()
    assert set(prepare.exports) == {"interface"}
    connect = bound(
        bind_program(
            plugin,
            "connect",
            Call(config=KERNEL, prepared={"interface": (NETDEV,)}, sandbox=SANDBOX),
        )
    )
    assert kinds(connect) == [
        ("move", "linux/link-move/v1"),
        ("state", "linux/link-configure/v1"),
    ]
    move, state = connect.effects
    # host-cni binds its carryHostAddresses (default false) to the move's carryHostConfig
    carry = {"carryHostConfig": False} if name == "host-cni" else {}
    assert move.parameters == {"ifName": "net1", **carry}
    assert state.parameters == {"mtu": 1500, "up": True}
    assert set(connect.exports) == {"interface"}


@pytest.mark.parametrize("name", ["host-cni", "sriov-cni"])
def test_kernel_infiniband_rdma_root(name: str, plugins: dict[str, Plugin]) -> None:
    config = {**KERNEL, "linkType": "infiniband", "rdmaAccess": True, "mtu": 2044}
    connect = bound(
        bind_program(
            plugins[name],
            "connect",
            Call(
                config=config,
                prepared={"ibInterface": (IPOIB,), "rdma": (RDMA,)},
                sandbox=SANDBOX,
            ),
        )
    )
    assert [k for _, k in kinds(connect)] == [
        "linux/link-move/v1",
        "ib/port-configure/v1",
        "linux/link-configure/v1",
        "rdma/netns-assign/v1",
        "rdma/device-access/v1",
    ]
    assert connect.effects[1].parameters == {"mode": "datagram"}
    assert connect.effects[4].parameters == {"nodes": ["uverbs", "rdma_cm"]}
    assert [e.id for e in connect.effects[:3]] == ["ib-move", "ipoib", "ib-state"]
    assert set(connect.exports) == {"ibInterface", "rdma"}


@pytest.mark.parametrize("name", ["host-cni", "sriov-cni"])
def test_vfio_root(name: str, plugins: dict[str, Plugin]) -> None:
    plugin = plugins[name]
    config = {"mode": "vfio", "resetOnPrepare": True}
    prepare = bound(
        bind_program(plugin, "prepare", Call(config=config, allocation={"function": (FUNCTION,)}))
    )
    assert kinds(prepare) == [("bind", "pci/driver-bind/v1"), ("reset", "pci/function-reset/v1")]
    assert prepare.effects[0].parameters == {"driver": "vfio-pci"}
    assert prepare.effects[1].recovery == "Quarantine"
    assert set(prepare.exports) == {"function"}
    connect = bound(
        bind_program(
            plugin,
            "connect",
            Call(config=config, prepared={"function": (VFIO_FUNCTION,)}, sandbox=SANDBOX),
        )
    )
    assert kinds(connect) == [("vfio-access", "vfio/device-access/v1")]
    assert connect.effects[0].parameters == {"accessBackend": "group"}
    assert set(connect.exports) == {"device"}


def test_sriov_switchdev_representor(plugins: dict[str, Plugin]) -> None:
    config = {**KERNEL, "representor": True}
    prepare = bound(
        bind_program(
            plugins["sriov-cni"],
            "prepare",
            Call(config=config, allocation={"interface": (NETDEV,), "representor": (REPRESENTOR,)}),
        )
    )
    assert kinds(prepare) == [("representor-down", "representor/configure/v1")]
    assert prepare.effects[0].parameters == {"up": False}
    assert set(prepare.exports) == {"interface", "representor"}


@pytest.mark.parametrize(("name", "mode"), [("macvlan-cni", "bridge"), ("ipvlan-cni", "l2")])
def test_shared_parent_root(name: str, mode: str, plugins: dict[str, Plugin]) -> None:
    kind = name.removesuffix("-cni")
    config = {"ifName": "net1", "mtu": 1400, "up": True}
    prepare = bound(
        bind_program(
            plugins[name], "prepare", Call(config=config, allocation={"parent": (PARENT,)})
        )
    )
    assert kinds(prepare) == [("hold", "share/hold-parent/v1")]
    assert prepare.effects[0].parameters == {"childKind": kind, "mode": mode}
    connect = bound(
        bind_program(
            plugins[name],
            "connect",
            Call(config=config, prepared={"parent": (SHARE,)}, sandbox=SANDBOX),
        )
    )
    # one effect: the child is created directly in the sandbox (issue 15)
    assert kinds(connect) == [("create", f"linux/create-{kind}/v2")]
    assert connect.effects[0].parameters == {
        "ifName": "net1",
        "mode": mode,
        "mtu": 1400,
        "up": True,
    }


BOND = {
    "ifName": "bond0",
    "mtu": 1500,
    "up": True,
    "mode": "active-backup",
    "monitorIntervalMs": 100,
    "failOverMac": "active",
}


@pytest.mark.parametrize("n", [2, 8])
def test_bond_expands_members(n: int, plugins: dict[str, Plugin]) -> None:
    members = tuple(member(i) for i in range(n))
    program = bound(
        bind_program(
            plugins["bond-cni"],
            "connect",
            Call(config=BOND, inputs={"members": members}, sandbox=SANDBOX),
        )
    )
    ids = [e.id for e in program.effects]
    assert ids == ["create", *[f"attach[{i}]" for i in range(n)], "state"]
    assert program.effects[0].parameters == {
        "ifName": "bond0",
        "mode": "active-backup",
        "miimon": 100,
        "failOverMac": "active",
        "mtu": 1500,
    }
    assert [e.inputs["member"][0] for e in program.effects[1:-1]] == list(members)


@pytest.mark.parametrize("n", [1, 9])
def test_bond_member_count_enforced(n: int, plugins: dict[str, Plugin]) -> None:
    members = tuple(member(i) for i in range(n))
    result = bind_program(
        plugins["bond-cni"],
        "connect",
        Call(config=BOND, inputs={"members": members}, sandbox=SANDBOX),
    )
    assert Code.E_CARDINALITY in codes(result)


VLAN = {"ifName": "tenant100", "mtu": 1500, "up": True, "vlanId": 100}


def test_vlan_binds_and_digest_is_stable(plugins: dict[str, Plugin]) -> None:
    call = Call(config=VLAN, inputs={"parent": (SANDBOX_PARENT,)}, sandbox=SANDBOX)
    first = bound(bind_program(plugins["vlan-cni"], "connect", call))
    again = bound(bind_program(plugins["vlan-cni"], "connect", call))
    assert first.digest == again.digest and first.digest.startswith("sha256:")
    assert first.effects[0].parameters == {"ifName": "tenant100", "vlanId": 100, "mtu": 1500}


def test_vlan_refuses_a_parent_without_create_child(plugins: dict[str, Plugin]) -> None:
    call = Call(config=VLAN, inputs={"parent": (member(0),)}, sandbox=SANDBOX)
    assert Code.E_ACCESS in codes(bind_program(plugins["vlan-cni"], "connect", call))


def test_vlan_refuses_an_infiniband_parent(plugins: dict[str, Plugin]) -> None:
    ib = handle(
        "ib1",
        HandleType.KERNEL_INTERFACE,
        frozenset({Access.READ, Access.CREATE_CHILD}),
        SANDBOX,
        LinkType.INFINIBAND,
    )
    result = bind_program(
        plugins["vlan-cni"], "connect", Call(config=VLAN, inputs={"parent": (ib,)}, sandbox=SANDBOX)
    )
    assert Code.E_PORT_TYPE in codes(result)


@pytest.mark.parametrize("ifname", ["lo", "eth0"])
def test_reserved_interface_names_refused(ifname: str, plugins: dict[str, Plugin]) -> None:
    call = Call(
        config={**VLAN, "ifName": ifname}, inputs={"parent": (SANDBOX_PARENT,)}, sandbox=SANDBOX
    )
    found = codes(bind_program(plugins["vlan-cni"], "connect", call))
    assert found & {Code.E_IFNAME, Code.E_PARAM_TYPE}


BRIDGE = {"bridge": "tenant-br", "vlan": 100, "mtu": 9000}


@pytest.mark.parametrize("name", ["accelerated-bridge-cni", "accelerated-bridge-cni-uplink"])
def test_bridge_operations(name: str, plugins: dict[str, Plugin]) -> None:
    config: dict[str, Any] = {**BRIDGE, "trunk": [200, 300]}
    if name.endswith("-uplink"):
        config["uplink"] = "uplink-a"
    program = bound(
        bind_program(
            plugins[name],
            "connect",
            Call(config=config, inputs={"representor": (REPRESENTOR,)}, sandbox=SANDBOX),
        )
    )
    expected = ["bridge/port-attach/v1", "bridge/port-vlan/v1", "representor/configure/v1"]
    if name.endswith("-uplink"):
        expected.insert(0, "bridge/shared-uplink-vlan/v1")
        assert program.effects[0].parameters == {
            "bridge": "tenant-br",
            "uplink": "uplink-a",
            "vlanId": 100,
        }
    assert [k for _, k in kinds(program)] == expected
    assert program.effects[-2].parameters == {"pvid": 100, "tagged": [200, 300]}
    assert program.effects[-1].parameters == {"up": True, "mtu": 9000}


def test_bridge_refuses_a_trunk_that_repeats_the_access_vlan(plugins: dict[str, Plugin]) -> None:
    config = {**BRIDGE, "trunk": [100]}
    result = bind_program(
        plugins["accelerated-bridge-cni"],
        "connect",
        Call(config=config, inputs={"representor": (REPRESENTOR,)}, sandbox=SANDBOX),
    )
    assert Code.E_PARAM_TYPE in codes(result)
    # The checker cannot see it (each value is valid alone); the binder's re-validation of
    # the concrete payload against the opcode's parameter model does.
    assert check_plugin(plugins["accelerated-bridge-cni"], REGISTRY, config) == []
    assert isinstance(result, list)
    assert any(d.path.startswith("effects[") and d.line > 1 for d in result)


@pytest.mark.parametrize("name", ["accelerated-bridge-cni", "accelerated-bridge-cni-uplink"])
def test_a_repeated_trunk_vlan_is_a_config_error(name: str, plugins: dict[str, Plugin]) -> None:
    """Caught by config validation (topology compile and admission), not first at bind."""
    config = {**BRIDGE, "uplink": "uplink-a", "trunk": [200, 300, 200]}
    if name == "accelerated-bridge-cni":
        del config["uplink"]
    diagnostics = check_plugin(plugins[name], REGISTRY, config)
    assert [(d.code, d.path) for d in diagnostics] == [(Code.E_SCHEMA, "config.trunk[2]")]


def test_ovs_operation(plugins: dict[str, Plugin]) -> None:
    program = bound(
        bind_program(
            plugins["ovs-cni"],
            "connect",
            Call(
                config={"bridge": "br-int", "vlan": 7, "mtu": 1500},
                inputs={"representor": (REPRESENTOR,)},
                sandbox=SANDBOX,
            ),
        )
    )
    assert [k for _, k in kinds(program)] == ["ovs/port-attach/v1", "representor/configure/v1"]
    assert program.effects[0].parameters == {"bridge": "br-int", "tag": 7}


def test_bridge_alias_must_be_a_dns_label(plugins: dict[str, Plugin]) -> None:
    result = bind_program(
        plugins["ovs-cni"],
        "connect",
        Call(
            config={"bridge": "Br_Int", "vlan": 7, "mtu": 1500},
            inputs={"representor": (REPRESENTOR,)},
            sandbox=SANDBOX,
        ),
    )
    assert Code.E_SCHEMA in codes(result)


def test_host_cni_carry_host_addresses_records_at_the_move_and_re_creates_after_state(
    plugins: dict[str, Plugin],
) -> None:
    config = {**KERNEL, "carryHostAddresses": True}
    connect = bound(
        bind_program(
            plugins["host-cni"],
            "connect",
            Call(config=config, prepared={"interface": (NETDEV,)}, sandbox=SANDBOX),
        )
    )
    assert kinds(connect) == [
        ("move", "linux/link-move/v1"),
        ("state", "linux/link-configure/v1"),
        ("carried", "ip/carried-host-config/v1"),
    ]
    move, _, carried = connect.effects
    assert move.parameters == {"ifName": "net1", "carryHostConfig": True}
    # the record travels in the move's own output handle
    (ref,) = carried.inputs["interface"]
    assert isinstance(ref, EffectOutputRef) and (ref.effect, ref.port) == ("move", "interface")
    for refused in ({**config, "up": False}, {**config, "linkType": "infiniband"}):
        result = bind_program(
            plugins["host-cni"],
            "connect",
            Call(config=refused, prepared={"interface": (NETDEV,)}, sandbox=SANDBOX),
        )
        assert not isinstance(result, BoundProgram)
        assert any(
            d.code is Code.E_SCHEMA and d.path == "config.carryHostAddresses" for d in result
        ), [str(d) for d in result]


def test_kernel_mode_without_an_interface_name_is_refused(plugins: dict[str, Plugin]) -> None:
    # configSchema cannot make ifName conditionally required; the bound payload can
    result = bind_program(
        plugins["sriov-cni"],
        "connect",
        Call(config={"mode": "kernel"}, prepared={"interface": (NETDEV,)}, sandbox=SANDBOX),
    )
    assert not isinstance(result, BoundProgram)
    assert any(d.code is Code.E_SCHEMA and d.path == "config.ifName" for d in result)


def test_a_clean_check_is_remembered_by_digest_and_binds_the_same(
    plugins: dict[str, Plugin], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Binding the same contract, hook and config again does not re-run the checker (issue
    15); the bound program is identical; a different config is checked afresh."""
    from dmn.engine import binder as binder_module
    from dmn.engine.checked_programs import CheckedPrograms

    table = CheckedPrograms()
    monkeypatch.setattr(binder_module, "CHECKED", table)
    runs: list[str] = []
    real = binder_module.check_program

    def counting(*args: Any, **kwargs: Any) -> Any:
        runs.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(binder_module, "check_program", counting)
    plugin = plugins["macvlan-cni"]
    call = Call(
        config={"ifName": "net1", "mtu": 1400, "up": True},
        prepared={"parent": (SHARE,)},
        sandbox=SANDBOX,
    )
    first = bound(bind_program(plugin, "connect", call))
    second = bound(bind_program(plugin, "connect", call))
    assert runs == ["connect"] and first.digest == second.digest
    assert table.digest(plugin) == plugin.contract_digest
    other = Call(
        config={"ifName": "net2", "mtu": 1400, "up": True},
        prepared={"parent": (SHARE,)},
        sandbox=SANDBOX,
    )
    bound(bind_program(plugin, "connect", other))
    assert runs == ["connect", "connect"]
    # a config that does not validate never binds (and nothing is remembered for it)
    bad = Call(config={"ifName": "net1", "mtu": 100, "up": True}, prepared={"parent": (SHARE,)})
    assert not isinstance(bind_program(plugin, "connect", bad), BoundProgram)
