"""Hostile CEL hardware selectors: refused by type and estimated cost before they run.

The cases of issue 39: seven nested ``.all()`` over 20-element lists never finished, six
took 21 s and linted clean, nested ``.map()`` grew past 470 MB; unknown variables and
functions linted clean. Every such selector is now refused with a reason code at the
field, and nothing evaluates it (lint, compile, explain and the webhook share the compiler;
the controller and the lab allocator go through :class:`CompiledSelector`).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.api.device_selectors import CompiledSelector, SelectorError
from dmn.api.selector_language import MAX_COST, check_selector
from dmn.controller.compile.compiler import compile_topology
from tests.compile.support import load_text

pytestmark = pytest.mark.adversarial

TWENTY = "[" + ",".join(str(i) for i in range(20)) + "]"
DOMAIN = 'device.attributes["dra-multi-network.schseba.github.io"]'
HEAD = """\
apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
kind: NetworkTopology
metadata: {name: t}
spec:
  effectBudget:
    allow: [linux/link-move/v1, linux/link-configure/v1]
  steps:
    - id: nic
      kind: Allocation
      pluginRef: {name: host-cni}
      config: {mode: kernel, ifName: net1, mtu: 1500, up: true}
      hardwareSelectors:
        - cel:
            expression: '%s'
"""


def nested(levels: int, macro: str = "all", body: str = "true") -> str:
    expression = body
    for k in range(levels):
        expression = f"{TWENTY}.{macro}(x{k}, {expression})"
    return expression


def diagnostics(expression: str, plugins: dict[str, Any]) -> list[Any]:
    data, source = load_text(HEAD % expression, "t.yaml")
    return list(compile_topology(data, plugins, source=source).diagnostics)


@pytest.mark.parametrize("levels", [5, 6, 7])
def test_nested_all_over_twenty_element_lists_is_refused_by_cost(
    levels: int, plugins: dict[str, Any]
) -> None:
    (diag,) = diagnostics(nested(levels), plugins)
    assert diag.code.value == "E_CEL_COST"
    assert diag.path == "spec.steps[0].hardwareSelectors[0].cel.expression"
    assert (diag.file, diag.line) == ("t.yaml", 14)
    assert "exceeds the limit 1000000" in diag.message


def test_four_nested_levels_stay_within_the_limit(plugins: dict[str, Any]) -> None:
    verdict = check_selector(nested(4))
    assert verdict.ok and verdict.cost is not None and verdict.cost <= MAX_COST
    assert diagnostics(nested(4), plugins) == []


def test_nested_map_is_refused_before_it_allocates(plugins: dict[str, Any]) -> None:
    grows = f"size({nested(5, 'map', 'x0')}) > 0"
    assert [d.code.value for d in diagnostics(grows, plugins)] == ["E_CEL_COST"]


def test_comprehension_over_device_attributes_uses_the_slice_limits() -> None:
    """An attribute value has at most 64 elements; three nested loops over one exceed."""
    one = f"{DOMAIN}.l.all(x, x == 1)"
    three = f"{DOMAIN}.l.all(x, {DOMAIN}.l.all(y, {DOMAIN}.l.all(z, x == y && y == z)))"
    assert check_selector(one).ok
    assert [p.code for p in check_selector(three).problems] == ["E_CEL_COST"]


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ('devic.driver == "x"', "undeclared reference to 'devic'"),
        ("frobnicate(device.driver)", "undeclared reference to function 'frobnicate'"),
        ('device.driver.frob("x")', "undeclared reference to function 'frob'"),
        ("device.drivers == 1", "undefined field 'drivers' of device"),
        ("device.driver == 1", "cannot compare string with int"),
        ('device.driver + 1 == "x"', "no operator + for string and int"),
        ('[1, "a"].size() == 2', "list elements must have one type"),
        ("device.driver", "must evaluate to bool, not string"),
        ("device.driver.startsWith(1)", "no matching overload"),
    ],
)
def test_type_errors_are_refused_at_the_field(
    expression: str, fragment: str, plugins: dict[str, Any]
) -> None:
    diags = diagnostics(expression, plugins)
    assert [d.code.value for d in diags] == ["E_CEL_TYPE"], diags
    assert fragment in diags[0].message
    assert (diags[0].file, diags[0].line) == ("t.yaml", 14)


@pytest.mark.parametrize(
    "expression",
    [
        f'has({DOMAIN}.vendor) && {DOMAIN}.vendor == "0x15b3"',
        '"dra-multi-network.schseba.github.io" in device.attributes',
        f'{DOMAIN}.names.exists(n, n.startsWith("eth") && n.matches("^eth[0-9]+$"))',
        'device.capacity["x.io"].mem.isGreaterThan(quantity("1Gi"))',
        f'cel.bind(d, {DOMAIN}, d.a == "x" || d.b > 2)',
        'device.attributes.exists(domain, ids, domain.endsWith(".io") && size(ids) > 0)',
        'semver("1.2.3").major() == 1 && device.allowMultipleAllocations',
        f'{DOMAIN}.pci.split(":").size() == 3',
    ],
)
def test_ordinary_selectors_pass(expression: str) -> None:
    verdict = check_selector(expression)
    assert verdict.ok, verdict.problems


@pytest.mark.parametrize(
    "expression",
    ["[" * 150 + "true" + "]" * 150, "!" * 300 + "true", "a" * 20000, "x" + ".y" * 200],
)
def test_oversized_or_overdeep_expressions_are_refused_without_recursion(expression: str) -> None:
    verdict = check_selector(expression)
    assert not verdict.ok
    assert verdict.problems[0].code in ("E_SYNTAX", "E_CEL_TYPE")


def test_the_runtime_refuses_what_the_estimate_refuses() -> None:
    """The controller's device counts and the lab allocator compile selectors through
    CompiledSelector: a costly one never reaches the ``cel`` binding."""
    with pytest.raises(SelectorError) as err:
        CompiledSelector(nested(7))
    assert err.value.reason == "CELCostLimit"
    assert CompiledSelector(nested(3)).matches(
        {"device": {"driver": "d", "attributes": {}, "capacity": {}}}
    )


_EVALUATE = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (20, 20))
    from dmn.api.device_selectors import CompiledSelector
    selector = CompiledSelector(sys.argv[1])
    device = {"driver": "d", "attributes": {}, "capacity": {}}
    print(selector.matches({"device": device}))
    """
)


@pytest.mark.parametrize(
    "expression", [nested(4), f"size({nested(3, 'map', 'x0')}) > 0", nested(4, "exists", "false")]
)
def test_the_costliest_accepted_selectors_finish_within_cpu_and_memory_limits(
    expression: str,
) -> None:
    """What the estimate lets through is evaluated in a child with 1 GiB of address space
    and 20 s of CPU: it completes (the limits are the test's bound, not a timing claim)."""
    assert check_selector(expression).ok
    done = subprocess.run(
        [sys.executable, "-c", _EVALUATE, expression],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() in ("True", "False")
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1 << 20  # KiB: < 1 GiB


_ATOMS = st.sampled_from(
    [
        "true",
        "1",
        '"s"',
        "device.driver",
        f"{DOMAIN}.v",
        TWENTY,
        "device.attributes",
        "x",
        "[1,2,3]",
    ]
)


def _grow(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, st.sampled_from(["all", "exists", "map", "filter"]), children).map(
            lambda t: f"{t[0]}.{t[1]}(x, {t[2]})"
        ),
        st.tuples(children, st.sampled_from(["&&", "||", "==", "+", "in", "<"]), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        children.map(lambda c: f"size({c}) > 0"),
        children.map(lambda c: f"{c}.matches({c})"),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(_ATOMS, _grow, max_leaves=12))
def test_generated_selectors_are_refused_or_bounded(expression: str) -> None:
    """Any generated expression is either refused with a reason code, or estimated within
    the limit — and then the real evaluator, run in a CPU- and memory-limited child for
    the costliest ones, completes."""
    verdict = check_selector(expression)
    for problem in verdict.problems:
        assert problem.code in ("E_SYNTAX", "E_CEL_TYPE", "E_CEL_COST")
    if not verdict.ok:
        return
    assert verdict.cost is not None and verdict.cost <= MAX_COST
    if verdict.cost < 50_000:
        return
    done = subprocess.run(
        [sys.executable, "-c", _EVALUATE, expression],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # a runtime error (missing attribute) is fine; being killed by a limit is not
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "MemoryError" not in done.stderr and "CPU time" not in done.stderr
