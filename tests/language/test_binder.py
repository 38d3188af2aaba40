"""The binder: guards, forEach expansion, handle and parameter re-validation, digests."""

from __future__ import annotations

from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram, EffectOutputRef
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.loader import load_builtin_plugins
from dmn.vocabulary.handles import Handle, NamespaceIdentity, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

from .support import ALLOCATION, OPERATION, codes, plugin, registry, variant

SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(7, 4026532000, "boot-1"))
OTHER = Scope(ScopeKind.SANDBOX, NamespaceIdentity(7, 4026532999, "boot-1"))
CONFIG = {"ifName": "tenant100", "vlanId": 100, "up": True}


def iface(
    name: str, *accesses: Access, scope: Scope = SANDBOX, link: LinkType = LinkType.ETHERNET
) -> Handle:
    return Handle(
        id=name,
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=f"inv-{name}",
        scope=scope,
        accesses=frozenset(accesses),
        link_type=link,
    )


PARENT = iface("parent", Access.CREATE_CHILD, Access.READ)


def bind(text: str, call: Call, hook: str = "connect") -> BoundProgram | list:
    return bind_program(plugin(text), hook, call, registry())


def test_bind_operation_substitutes_handles_outputs_and_config() -> None:
    bound = bind(
        OPERATION,
        Call(config=CONFIG, operation_id="op1", inputs={"parent": (PARENT,)}, sandbox=SANDBOX),
    )
    assert isinstance(bound, BoundProgram)
    make, tune = bound.effects
    assert make.inputs == {"parent": (PARENT,)}
    assert make.parameters == {"ifName": "tenant100", "vlanId": 100}
    assert tune.inputs == {"interface": (EffectOutputRef("make", "interface"),)}
    assert tune.parameters == {"up": True}
    assert make.requires == ("same-sandbox",) and make.postconditions == ("made",)
    assert make.recovery == "ObserveAndReconcile"
    assert bound.exports == {"interface": (EffectOutputRef("make", "interface"),)}
    assert (
        bound.plugin == "op"
        and bound.hook == "connect"
        and bound.contract_digest.startswith("sha256:")
    )
    # Explicit false is bound as false, not dropped.
    bound2 = bind(
        OPERATION,
        Call(config={**CONFIG, "up": False}, inputs={"parent": (PARENT,)}, sandbox=SANDBOX),
    )
    assert isinstance(bound2, BoundProgram)
    assert bound2.effects[1].parameters == {"up": False}


def test_digest_is_deterministic_and_round_trips() -> None:
    call = Call(config=CONFIG, inputs={"parent": (PARENT,)}, sandbox=SANDBOX)
    a = bind(OPERATION, call)
    b = bind(OPERATION, call)
    assert isinstance(a, BoundProgram) and isinstance(b, BoundProgram)
    assert a.digest == b.digest
    assert BoundProgram.from_json(a.to_json()).digest == a.digest
    c = bind(
        OPERATION,
        Call(config={**CONFIG, "vlanId": 101}, inputs={"parent": (PARENT,)}, sandbox=SANDBOX),
    )
    assert isinstance(c, BoundProgram) and c.digest != a.digest


def test_bad_config_and_bad_handles_are_diagnostics() -> None:
    call = Call(config={**CONFIG, "vlanId": 0}, inputs={"parent": (PARENT,)}, sandbox=SANDBOX)
    assert codes(bind(OPERATION, call)) == {"E_SCHEMA"}  # type: ignore[arg-type]
    call = Call(config={**CONFIG, "ifName": "a:b"}, inputs={"parent": (PARENT,)}, sandbox=SANDBOX)
    assert "E_IFNAME" in codes(bind(OPERATION, call))  # type: ignore[arg-type]
    reader = iface("parent", Access.READ)
    assert codes(
        bind(OPERATION, Call(config=CONFIG, inputs={"parent": (reader,)}, sandbox=SANDBOX))
    ) == {"E_ACCESS"}  # type: ignore[arg-type]
    ib = iface("parent", Access.CREATE_CHILD, link=LinkType.INFINIBAND)
    assert codes(
        bind(OPERATION, Call(config=CONFIG, inputs={"parent": (ib,)}, sandbox=SANDBOX))
    ) == {"E_PORT_TYPE"}  # type: ignore[arg-type]
    assert codes(bind(OPERATION, Call(config=CONFIG, inputs={}, sandbox=SANDBOX))) >= {
        "E_CARDINALITY",
        "E_REF_UNRESOLVED",
    }  # type: ignore[arg-type]
    assert codes(
        bind(OPERATION, Call(config=CONFIG, inputs={"parent": (PARENT, PARENT)}, sandbox=SANDBOX))
    ) >= {"E_CARDINALITY"}  # type: ignore[arg-type]


def test_a_program_that_does_not_check_does_not_bind() -> None:
    text = variant(OPERATION, "kind: t/tune/v1", "kind: t/nope/v1")
    result = bind(text, Call(config=CONFIG, inputs={"parent": (PARENT,)}, sandbox=SANDBOX))
    assert isinstance(result, list) and codes(result) == {"E_UNKNOWN_OPCODE"}
    assert codes(bind(OPERATION, Call(config=CONFIG), hook="prepare")) == {"E_SCHEMA"}  # type: ignore[arg-type]


def test_guards_skip_effects_and_conditional_exports() -> None:
    fn = Handle(
        id="vf",
        type=HandleType.PCI_FUNCTION,
        inventory_id="pci-1",
        accesses=frozenset({Access.EXCLUSIVE_CONFIGURE}),
    )
    netdev = iface(
        "eth-vf", Access.EXCLUSIVE_CONFIGURE, Access.EXCLUSIVE_MASTER, scope=Scope(ScopeKind.HOST)
    )
    kernel = Call(config={"mode": "kernel"}, allocation={"function": (fn,), "interface": (netdev,)})
    prep = bind(ALLOCATION, kernel, hook="prepare")
    assert isinstance(prep, BoundProgram)
    assert prep.effects == ()  # reset is off by default
    assert prep.exports == {"interface": (netdev,), "function": (fn,)}
    reset = bind(
        ALLOCATION,
        Call(config={"mode": "kernel", "reset": True}, allocation=kernel.allocation),
        hook="prepare",
    )
    assert isinstance(reset, BoundProgram) and [e.id for e in reset.effects] == ["reset"]
    assert reset.effects[0].recovery == "Quarantine"
    conn = bind(
        ALLOCATION, Call(config={"mode": "kernel"}, prepared=dict(prep.exports), sandbox=SANDBOX)
    )
    assert isinstance(conn, BoundProgram) and [e.id for e in conn.effects] == ["tune"]
    assert set(conn.exports) == {"interface", "function"}
    vfio = Call(config={"mode": "vfio"}, allocation={"function": (fn,)})
    prep = bind(ALLOCATION, vfio, hook="prepare")
    assert isinstance(prep, BoundProgram) and set(prep.exports) == {"function"}
    conn = bind(
        ALLOCATION, Call(config={"mode": "vfio"}, prepared=dict(prep.exports), sandbox=SANDBOX)
    )
    assert (
        isinstance(conn, BoundProgram) and conn.effects == () and set(conn.exports) == {"function"}
    )


def test_bond_members_expand_with_for_each() -> None:
    bond = load_builtin_plugins()["bond-cni"]
    members = tuple(iface(f"m{i}", Access.ATTACH_MEMBER, Access.READ) for i in range(3))
    config = {
        "ifName": "bond0",
        "mtu": 1500,
        "up": True,
        "mode": "active-backup",
        "monitorIntervalMs": 100,
        "failOverMac": "active",
    }
    bound = bind_program(
        bond, "connect", Call(config=config, inputs={"members": members}, sandbox=SANDBOX)
    )
    assert isinstance(bound, BoundProgram), [d.render() for d in bound]
    attach = [e for e in bound.effects if e.source_id == "attach"]
    assert [e.id for e in attach] == ["attach[0]", "attach[1]", "attach[2]"]
    assert [e.inputs["member"] for e in attach] == [(m,) for m in members]
    # A member in another sandbox, a member without AttachMember, too few members.
    stray = (*members[:2], iface("m9", Access.ATTACH_MEMBER, scope=OTHER))
    assert "E_PORT_TYPE" in codes(
        bind_program(
            bond, "connect", Call(config=config, inputs={"members": stray}, sandbox=SANDBOX)
        )
    )  # type: ignore[arg-type]
    weak = (*members[:2], iface("m9", Access.READ))
    assert "E_ACCESS" in codes(
        bind_program(
            bond, "connect", Call(config=config, inputs={"members": weak}, sandbox=SANDBOX)
        )
    )  # type: ignore[arg-type]
    assert "E_CARDINALITY" in codes(
        bind_program(
            bond, "connect", Call(config=config, inputs={"members": members[:1]}, sandbox=SANDBOX)
        )
    )  # type: ignore[arg-type]


def test_binder_never_hands_a_create_child_grant_to_a_configuring_opcode() -> None:
    # The descriptor promises ExclusiveConfigure on `other`, so the program checks; the
    # call's handle only grants CreateChild (a shared parent). The binder refuses both at
    # the port and at the effect, with the shared-parent code for the effect.
    text = variant(
        OPERATION,
        "  outputs:\n",
        "    other: {type: KernelInterface/v1, access: ExclusiveConfigure}\n  outputs:\n",
    )
    text = variant(
        text,
        "      exports:\n",
        "        - id: tune-other\n          kind: t/tune/v1\n"
        "          inputs: {interface: {from: call.inputs.other}}\n"
        "          parameters: {mtu: 1500}\n      exports:\n",
    )
    assert codes(check_plugin(plugin(text), registry())) == set()
    good = iface("other", Access.EXCLUSIVE_CONFIGURE)
    call = Call(config=CONFIG, inputs={"parent": (PARENT,), "other": (good,)}, sandbox=SANDBOX)
    assert isinstance(bind(text, call), BoundProgram)
    shared = iface("other", Access.CREATE_CHILD, Access.READ)
    call = Call(config=CONFIG, inputs={"parent": (PARENT,), "other": (shared,)}, sandbox=SANDBOX)
    result = bind(text, call)
    assert isinstance(result, list)
    assert codes(result) == {"E_ACCESS", "E_SHARED_PARENT_MUTATION"}
    mutation = next(d for d in result if d.code.value == "E_SHARED_PARENT_MUTATION")
    assert mutation.path == "spec.hooks.connect.effects[2].inputs.interface"
    assert mutation.line > 1 and mutation.file == "plugin.yaml"


def test_connect_needs_the_verified_sandbox_and_prepare_has_none() -> None:
    call = Call(config=CONFIG, inputs={"parent": (PARENT,)})
    result = bind(OPERATION, call)
    assert isinstance(result, list)
    assert [(d.code.value, d.path) for d in result] == [("E_SCHEMA", "call.sandbox")]
    host = Call(config=CONFIG, inputs={"parent": (PARENT,)}, sandbox=Scope(ScopeKind.HOST))
    assert codes(bind(OPERATION, host)) == {"E_SCHEMA"}  # type: ignore[arg-type]
    fn = Handle(
        id="vf",
        type=HandleType.PCI_FUNCTION,
        inventory_id="pci-1",
        accesses=frozenset({Access.EXCLUSIVE_CONFIGURE}),
    )
    early = Call(config={"mode": "vfio"}, allocation={"function": (fn,)}, sandbox=SANDBOX)
    result = bind(ALLOCATION, early, hook="prepare")
    assert isinstance(result, list)
    assert [(d.code.value, d.path) for d in result] == [("E_SCHEMA", "call.sandbox")]
