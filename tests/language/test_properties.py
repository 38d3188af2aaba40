"""Property tests: arbitrary and mutated input always yields diagnostics, never an exception.

Across these tests hypothesis generates > 10,000 examples per run (see the settings of
each); the checks are cheap, so the whole module stays well under a minute.
"""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.interpreter.checker import check_plugin, check_program
from dmn.interpreter.config_schema import (
    ArraySchema,
    BooleanSchema,
    IntegerSchema,
    ObjectSchema,
    StringSchema,
    validate_config,
)
from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.documents import NetworkPlugin
from dmn.interpreter.expressions import GuardError, evaluate, parse_guard, parse_reference
from dmn.interpreter.loader import Plugin, load_builtin_plugins, load_text, plugin_from_descriptor
from dmn.interpreter.parameters import config_samples
from dmn.opcodes.registry import default_registry
from dmn.vocabulary.handles import Handle, NamespaceIdentity, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

pytestmark = pytest.mark.property


def examples(n: int) -> settings:
    """No deadline (CI machines are shared), no example database written into the repo."""
    return settings(
        max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )


VOCABULARY = [
    "call.inputs.parent",
    "call.inputs.members",
    "call.inputs.members[1]",
    "call.allocation",
    "call.allocation.interface",
    "call.prepared.interface",
    "call.prepared.function",
    "call.sandbox",
    "call.config.mode",
    "call.config.ifName",
    "call.config.up",
    "effects.create.interface",
    "effects.move.interface",
    "effects.attach.member",
    "member",
    'call.config.mode == "kernel"',
    "call.config.rdmaAccess and not call.config.up",
    "call.config.vlanId >= 10",
    "linux/link-move/v1",
    "linux/create-vlan/v1",
    "pci/function-reset/v1",
    "share/hold-parent/v1",
    "CreateChild",
    "ExclusiveConfigure",
    "AttachMember",
    "KernelInterface/v1",
    "SharedParent/v1",
    "PciFunction/v1",
    "ethernet",
    "infiniband",
    "connect",
    "prepare",
    "Quarantine",
    "RestoreBeforeImage",
    "eth0/1",
    "a" * 16,
    "",
    "(",
    "]",
]

TOKENS = [
    "call", "config", "inputs", "prepared", "allocation", "sandbox", "effects", ".", "[", "]",
    "0", "1", "99999", "-3", "==", "!=", "<", "<=", ">", ">=", "in", "not", "and", "or", "(",
    ")", '"x"', "'y'", "true", "false", "null", ",", "mode", "member", "a-b", "\\", '"', "\n",
]  # fmt: skip

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.text(max_size=12) | st.sampled_from(VOCABULARY)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.sampled_from(VOCABULARY), children, max_size=4)
    ),
    max_leaves=20,
)


def assert_diagnostics(value: object) -> None:
    assert isinstance(value, list)
    assert all(isinstance(d, Diagnostic) for d in value)
    for d in value:
        assert d.line >= 1 and d.column >= 1
        json.dumps(d.to_json())


# ----------------------------------------------------------------------------- text


@examples(3500)
@given(st.text(max_size=300) | st.binary(max_size=200))
def test_arbitrary_text_to_documents(text: str | bytes) -> None:
    docs, diags = load_text(text, "fuzz.yaml")
    assert_diagnostics(diags)
    for model, _doc in docs:
        assert model is None or hasattr(model, "model_dump")


@examples(3000)
@given(st.text(max_size=120))
def test_arbitrary_text_to_expressions(text: str) -> None:
    for parse in (parse_guard, parse_reference):
        expr, diags = parse(text)
        assert_diagnostics(diags)
        assert (expr is None) == bool(diags)


@examples(2500)
@given(
    st.lists(st.sampled_from(TOKENS), max_size=25),
    st.dictionaries(st.sampled_from(["mode", "up", "x"]), json_scalars, max_size=3),
)
def test_token_soup_parses_or_diagnoses_and_evaluates_or_raises_guard_error(
    tokens: list[str], config: dict[str, Any]
) -> None:
    text = " ".join(tokens)
    expr, diags = parse_guard(text)
    assert_diagnostics(diags)
    if expr is not None:
        with contextlib.suppress(GuardError):
            evaluate(expr, config)


# ----------------------------------------------------------------------------- YAML


def dump(value: Any) -> str:
    return json.dumps(value)  # JSON is YAML


@examples(800)
@given(json_values)
def test_arbitrary_yaml_documents(value: Any) -> None:
    for kind, api in (
        ("HookProgram", "effects.dra-multi-network.schseba.github.io/v1alpha1"),
        ("NetworkPlugin", "networking.dra-multi-network.schseba.github.io/v1alpha1"),
    ):
        doc = {
            "apiVersion": api,
            "kind": kind,
            **(value if isinstance(value, dict) else {"spec": value}),
        }
        docs, diags = load_text(dump(doc), "fuzz.yaml")
        assert_diagnostics(diags)
        for model, yaml_doc in docs:
            if isinstance(model, NetworkPlugin):
                plugin, merge = plugin_from_descriptor(model, yaml_doc.source)
                assert_diagnostics(merge + check_plugin(plugin, REGISTRY))


@examples(500)
@given(json_values, json_values)
def test_arbitrary_config_against_builtin_schemas(value: Any, other: Any) -> None:
    for plugin in BUILTINS.values():
        _, diags = validate_config(plugin.descriptor.spec.config_schema, value)
        assert_diagnostics(diags)
    assert_diagnostics(
        check_plugin(BUILTINS["vlan-cni"], REGISTRY, other if isinstance(other, dict) else {})
    )


# ----------------------------------------------------------------------------- mutated builtins

REGISTRY = default_registry()
BUILTINS = load_builtin_plugins()
SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(1, 2, "boot"))


def inline(plugin: Plugin) -> dict[str, Any]:
    """The plugin as one NetworkPlugin document with its programs inline."""
    data = plugin.descriptor.model_dump(mode="json", by_alias=True, exclude_unset=True)
    hooks = data["spec"].setdefault("hooks", {})
    for hook, prog in plugin.programs.items():
        hooks[hook] = prog.body.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return data


def sample(prop: Any, name: str) -> Any:
    if isinstance(prop, BooleanSchema):
        return True
    if isinstance(prop, IntegerSchema):
        if prop.enum:
            return prop.enum[0]
        return prop.minimum if prop.minimum is not None else 1
    if isinstance(prop, StringSchema):
        if prop.enum:
            return prop.enum[0]
        if prop.format is not None:
            return config_samples(prop)[0]
        if name.lower().endswith("ifname"):
            return "net1"
        if name.lower().endswith("mac"):
            return "02:00:00:00:00:01"
        return "a" * max(prop.min_length or 1, 1)
    if isinstance(prop, ArraySchema):
        return [sample(prop.items, name)] * (prop.min_items or 0)
    if isinstance(prop, ObjectSchema):
        if prop.min_properties:
            return config_samples(prop)[0]
        return {k: sample(v, k) for k, v in prop.properties.items() if k in prop.required}
    return None


def handle(name: str, type_: HandleType, accesses: Any, link: str | None, scope: Scope) -> Handle:
    if type_ is HandleType.HOST_REPRESENTOR:
        scope = Scope(ScopeKind.HOST)
    return Handle(
        id=name,
        type=type_,
        inventory_id=f"inv-{name}",
        scope=scope,
        accesses=frozenset(Access(a) for a in accesses) | {Access.READ},
        link_type=LinkType(link) if link else LinkType.ETHERNET,
    )


def call_for(plugin: Plugin, hook: str) -> Call:
    """A plausible call: sample config, handles for every port, prepare's exports."""
    spec = plugin.descriptor.spec
    schema = spec.config_schema
    config = {k: sample(v, k) for k, v in schema.properties.items()}
    # Drop what forbiddenWhen rules out for these values (e.g. ifName in vfio mode).
    _, problems = validate_config(schema, config)
    for d in problems:
        if "must be absent" in d.message:
            config.pop(d.path.removeprefix("config."), None)

    def handles(ports: dict[str, Any] | None, scope: Scope) -> dict[str, tuple[Handle, ...]]:
        return {
            name: tuple(
                handle(f"{name}-{i}", HandleType(port.type), port.accesses(), port.link_type, scope)
                for i in range(max(port.min_items, 1))
            )
            for name, port in (ports or {}).items()
        }

    prepared: dict[str, tuple[Handle, ...]] = {}
    if hook == "connect" and "prepare" in plugin.programs:
        before = bind_program(plugin, "prepare", call_for(plugin, "prepare"), REGISTRY)
        if isinstance(before, BoundProgram):
            kinds = {e.id: e for e in before.effects}
            for name, values in before.exports.items():
                made: list[Handle] = []
                for value in values:
                    if isinstance(value, Handle):
                        made.append(value)
                        continue
                    effect = kinds[value.effect]
                    spec_ = REGISTRY.get(effect.kind)
                    assert spec_ is not None
                    out = spec_.outputs[value.port]
                    accesses = set(out.grants)
                    if out.inherits:
                        for h in effect.inputs.get(out.inherits, ()):
                            if isinstance(h, Handle):
                                accesses |= h.accesses
                    made.append(
                        handle(f"{name}-p", out.type, accesses, None, Scope(ScopeKind.HOST))
                    )
                prepared[name] = tuple(made)
    return Call(
        config=config,
        operation_id="op-fuzz",
        allocation=handles(spec.allocation, Scope(ScopeKind.HOST)),
        inputs=handles(spec.inputs, SANDBOX),
        prepared=prepared,
        sandbox=SANDBOX if hook == "connect" else None,
    )


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def mutate(doc: dict[str, Any], path: tuple[Any, ...], op: int, payload: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    if not path:
        return doc
    parent: Any = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if op == 0:  # delete
        del parent[last]
    elif op == 1:  # replace
        parent[last] = payload
    elif op == 2 and isinstance(parent, list):  # duplicate a list item
        parent.insert(last, copy.deepcopy(parent[last]))
    elif op == 3 and isinstance(parent, dict):  # rename a key
        parent[str(payload)[:20] or "x"] = parent.pop(last)
    else:
        parent[last] = payload
    return doc


NAMES = sorted(BUILTINS)


@examples(1000)
@given(
    st.sampled_from(NAMES),
    st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(0, 4), json_values), min_size=1, max_size=3
    ),
)
def test_mutated_builtins_check_and_bind_without_exceptions(
    name: str, mutations: list[tuple[int, int, Any]]
) -> None:
    doc = inline(BUILTINS[name])
    for pick, op, payload in mutations:
        candidates = paths(doc)
        doc = mutate(doc, candidates[pick % len(candidates)], op, payload)
    docs, diags = load_text(dump(doc), f"{name}.yaml")
    assert_diagnostics(diags)
    for model, yaml_doc in docs:
        if not isinstance(model, NetworkPlugin):
            continue
        plugin, merge = plugin_from_descriptor(model, yaml_doc.source)
        assert_diagnostics(merge)
        assert_diagnostics(check_plugin(plugin, REGISTRY))
        for hook in plugin.programs:
            assert_diagnostics(check_program(plugin, hook, REGISTRY))
            result = bind_program(plugin, hook, call_for(plugin, hook), REGISTRY)
            if not isinstance(result, BoundProgram):
                assert_diagnostics(result)
            else:
                BoundProgram.from_json(json.loads(result.canonical()))


def test_unmutated_builtins_bind() -> None:
    # The fuzz harness itself must produce bindable calls, or the binder is barely exercised.
    failures = {}
    for name, plugin in BUILTINS.items():
        for hook in plugin.programs:
            result = bind_program(plugin, hook, call_for(plugin, hook), REGISTRY)
            if not isinstance(result, BoundProgram):
                failures[f"{name}/{hook}"] = [d.render() for d in result]
    assert failures == {}
