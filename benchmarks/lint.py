"""How fast the language core checks programs (issue 2).

Measures, in one run:

* ``check builtins``: ``check_plugin`` over every builtin plugin, repeated for at least
  ``--seconds`` — plugins and hook programs checked per second (median of rounds);
* ``load+check builtins``: the same including YAML loading and document validation from
  the files (what ``dmn lint programs`` does per plugin);
* ``check 256-effect program`` / ``bind 256-effect program``: one connect program at the
  effect budget (a VLAN plus 255 chained link-configure effects), median time per call.

Usage: ``python benchmarks/lint.py [--seconds 1.0] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.loader import (
    Plugin,
    builtin_programs_root,
    load_builtin_plugins,
    load_plugins,
    load_text,
    plugin_from_descriptor,
)
from dmn.opcodes.registry import default_registry
from dmn.vocabulary.handles import Handle, NamespaceIdentity, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

HEADER = """\
apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
kind: NetworkPlugin
metadata: {name: bench-256}
spec:
  implementation: {type: EffectProgram}
  contractVersion: v1
  stepKinds: [Operation]
  configSchema:
    type: object
    additionalProperties: false
    required: [ifName, mtu, up, vlanId]
    properties:
      ifName: {type: string, minLength: 1, maxLength: 15}
      mtu: {type: integer, minimum: 576, maximum: 9000}
      up: {type: boolean}
      vlanId: {type: integer, minimum: 1, maximum: 4094}
  inputs:
    parent: {type: KernelInterface/v1, linkType: ethernet, access: CreateChild}
  outputs:
    interface: {type: KernelInterface/v1, linkType: ethernet, ownership: Created}
  allowedEffects: [linux/create-vlan/v1, linux/link-configure/v1]
  stateContract: {version: v1, cleanup: RecordedEffects}
  hooks:
    remove: {undo: connect}
    connect:
      effects:
        - id: e0
          kind: linux/create-vlan/v1
          inputs: {parent: {from: call.inputs.parent}}
          parameterBindings:
            ifName: {from: call.config.ifName}
            vlanId: {from: call.config.vlanId}
            mtu: {from: call.config.mtu}
          requires: [{kind: same-sandbox}, {kind: create-child-grant}]
          postconditions: [{kind: vlan-parent-and-tag-match}]
          recovery: {strategy: ObserveAndReconcile}
"""
STEP = """\
        - id: e{i}
          kind: linux/link-configure/v1
          when: 'call.config.up or call.config.mtu > {mtu}'
          inputs: {{interface: {{from: effects.e{prev}.interface}}}}
          parameterBindings: {{up: {{from: call.config.up}}}}
          parameters: {{mtu: {mtu}}}
"""


def budget_program(effects: int = 256) -> str:
    body = "".join(STEP.format(i=i, prev=i - 1, mtu=1000 + i) for i in range(1, effects))
    return (
        HEADER
        + body
        + f"      exports:\n        interface: {{from: effects.e{effects - 1}.interface}}\n"
    )


def load_single(text: str) -> Plugin:
    docs, diags = load_text(text, "bench.yaml")
    assert not diags, [d.render() for d in diags]
    model = docs[0][0]
    plugin, merge = plugin_from_descriptor(model, docs[0][1].source)
    assert not merge
    return plugin


def rounds(fn: Callable[[], int], seconds: float) -> tuple[float, int]:
    """Run ``fn`` (returns units of work) in rounds for ``seconds``; median units/s."""
    rates: list[float] = []
    total = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(rates) < 5:
        start = time.perf_counter()
        units = fn()
        rates.append(units / (time.perf_counter() - start))
        total += units
    return statistics.median(rates), total


def per_call(fn: Callable[[], object], seconds: float) -> tuple[float, int]:
    """Median seconds per call of ``fn`` over at least ``seconds`` (≥ 5 calls)."""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    registry = default_registry()
    builtins = load_builtin_plugins()
    programs = sum(len(p.programs) for p in builtins.values())
    for plugin in builtins.values():
        assert check_plugin(plugin, registry) == [], plugin.name

    def check_all() -> int:
        for plugin in builtins.values():
            check_plugin(plugin, registry)
        return programs

    def load_check_all() -> int:
        loaded, _ = load_plugins(builtin_programs_root())
        for plugin in loaded.values():
            check_plugin(plugin, registry)
        return programs

    check_rate, checked = rounds(check_all, args.seconds)
    load_rate, loaded = rounds(load_check_all, args.seconds)

    big = load_single(budget_program(256))
    assert check_plugin(big, registry) == []
    sandbox = Scope(ScopeKind.SANDBOX, NamespaceIdentity(1, 2, "boot"))
    parent = Handle(
        id="parent",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id="parent",
        scope=sandbox,
        accesses=frozenset({Access.CREATE_CHILD, Access.READ}),
        link_type=LinkType.ETHERNET,
    )
    call = Call(
        config={"ifName": "tenant", "mtu": 1500, "up": True, "vlanId": 100},
        inputs={"parent": (parent,)},
        sandbox=sandbox,
    )
    bound = bind_program(big, "connect", call, registry)
    assert isinstance(bound, BoundProgram) and len(bound.effects) == 256
    check_256, n_check = per_call(lambda: check_plugin(big, registry), args.seconds)
    bind_256, n_bind = per_call(lambda: bind_program(big, "connect", call, registry), args.seconds)
    text = budget_program(256)
    parse_256, n_parse = per_call(lambda: load_single(text), args.seconds)

    results: dict[str, Any] = {
        "builtin_plugins": len(builtins),
        "builtin_programs": programs,
        "check_programs_per_s": round(check_rate, 1),
        "check_programs_measured": checked,
        "load_check_programs_per_s": round(load_rate, 1),
        "load_check_programs_measured": loaded,
        "check_256_effects_ms": round(check_256 * 1000, 2),
        "check_256_runs": n_check,
        "bind_256_effects_ms": round(bind_256 * 1000, 2),
        "bind_256_runs": n_bind,
        "load_256_effects_ms": round(parse_256 * 1000, 2),
        "load_256_runs": n_parse,
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    rows = [
        ("check builtins (programs/s)", f"{check_rate:,.0f}", f"{checked} programs"),
        ("load+check builtins (programs/s)", f"{load_rate:,.0f}", f"{loaded} programs"),
        ("  ratio check / load+check", f"{check_rate / load_rate:.2f}x", ""),
        ("load 256-effect program (ms)", f"{parse_256 * 1000:.2f}", f"{n_parse} runs"),
        ("check 256-effect program (ms)", f"{check_256 * 1000:.2f}", f"{n_check} runs"),
        ("bind 256-effect program (ms)", f"{bind_256 * 1000:.2f}", f"{n_bind} runs (incl. check)"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'median':>10}  sample")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>10}  {note}")
    print(
        f"({len(builtins)} builtin plugins, {programs} hook programs; Python {results['python']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
