"""Clean checker verdicts reused within one compile answer exactly what a fresh check does.

:class:`dmn.interpreter.checker.CleanVerdicts` remembers a clean verdict with the config
fields the checker read; a config that reads the same gets it without re-running the
checks. For random guards (the plugin of ``test_guard_agreement``) and a random sequence of
configs through *one* memo, every answer — diagnostics and the opcodes the compiler counts —
equals a fresh :func:`check_plugin` for that config alone;
and on the builtin plugins a 32-step topology checks each plugin far fewer times than it
has steps, with the same revision as checking every step afresh.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.compile import topology_32
from dmn.controller.compile import compiler as compiler_module
from dmn.controller.compile.compiler import compile_topology
from dmn.controller.compile.programs import step_verdicts
from dmn.interpreter.checker import CleanVerdicts, check_plugin
from dmn.interpreter.checker.clean_verdicts import ConfigReads
from dmn.interpreter.config_schema import validate_config
from dmn.interpreter.loader import load_builtin_plugins
from dmn.opcodes.registry import default_registry

from .support import registry
from .test_guard_agreement import _plugin, configs, guards

pytestmark = pytest.mark.property


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(when=guards, required_when=guards, sequence=st.lists(configs, min_size=1, max_size=8))
def test_one_memo_answers_like_a_fresh_check(
    when: str, required_when: str, sequence: list[dict[str, Any]]
) -> None:
    plugin = _plugin(when, required_when)
    reg = registry()
    memo = step_verdicts()
    for config in sequence:
        normalised, problems = validate_config(plugin.descriptor.spec.config_schema, config)
        if problems:  # the compiler reports these and never checks the step
            continue
        found = memo.check(plugin, reg, normalised)
        assert found == check_plugin(plugin, reg, config)


def test_reads_record_values_presence_and_whole_views() -> None:
    reads = ConfigReads({"a": 1, "b": [2], "c": "x"})
    assert reads.get("a") == 1 and "c" in reads and reads.get("zz") is None
    assert "nope" not in reads
    assert reads.reads() == {"a": "1", "c": "\x00present", "zz": "\x00absent", "nope": "\x00absent"}
    assert not reads.whole
    assert sorted(reads) == ["a", "b", "c"] and reads.whole


def test_a_verdict_that_read_a_field_is_not_reused_for_another_value() -> None:
    plugin = _plugin("call.config.mode == 'a'", "false")
    reg = registry()
    memo = step_verdicts()
    base = {"ifName": "net1", "vlanId": 100, "up": True}
    for mode in ("a", "b", "a", "b"):
        config, problems = validate_config(
            plugin.descriptor.spec.config_schema, {**base, "mode": mode}
        )
        assert not problems
        assert memo.check(plugin, reg, config) == []
    assert memo.checked == 2 and memo.reused == 2
    # ifName and vlanId are read by no guard: a different value reuses the verdict
    config, _ = validate_config(
        plugin.descriptor.spec.config_schema, {**base, "mode": "a", "ifName": "other"}
    )
    memo.check(plugin, reg, config)
    assert memo.checked == 2 and memo.reused == 3


def test_a_verdict_with_diagnostics_is_never_reused() -> None:
    plugin = _plugin("call.config.mode == 'z'", "false")  # 'z' is never a mode: E_GUARD_TYPE
    reg = registry()
    memo = step_verdicts()
    config, _ = validate_config(
        plugin.descriptor.spec.config_schema, {"ifName": "net1", "vlanId": 100, "up": True}
    )
    first = memo.check(plugin, reg, config)
    second = memo.check(plugin, reg, config)
    assert first and first == second == check_plugin(plugin, reg, config)
    assert memo.checked == 2 and memo.reused == 0


def test_a_32_step_topology_checks_each_plugin_once(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins = load_builtin_plugins()
    reg = default_registry()
    text = yaml.safe_dump(topology_32(), sort_keys=False)
    data = yaml.safe_load(text)
    memos: list[CleanVerdicts] = []

    def recording() -> CleanVerdicts:
        memos.append(step_verdicts())
        return memos[-1]

    monkeypatch.setattr(compiler_module, "step_verdicts", recording)
    result = compile_topology(data, plugins, reg, uid="u")
    assert result.compiled is not None, [d.render() for d in result.diagnostics]
    (memo,) = memos
    assert memo.checked == 3 and memo.reused == 29  # sriov, bond and vlan: once each

    class Fresh(CleanVerdicts):
        def check(self, plugin: Any, registry: Any, config: Any) -> Any:
            return CleanVerdicts().check(plugin, registry, config)

    monkeypatch.setattr(compiler_module, "step_verdicts", Fresh)
    fresh = compile_topology(data, plugins, reg, uid="u")
    assert fresh.compiled is not None
    assert fresh.compiled.revision == result.compiled.revision
    assert fresh.diagnostics == result.diagnostics


def test_a_memo_handed_to_compiles_checks_each_plugin_once_across_them() -> None:
    """What the controller's topology reconciler does: one memo across compiles (a topology
    is compiled again after its status write and on every resync) gives the same revision
    and diagnostics as a fresh compile, without checking again."""
    plugins = load_builtin_plugins()
    reg = default_registry()
    data = yaml.safe_load(yaml.safe_dump(topology_32(), sort_keys=False))
    memo = CleanVerdicts(kept_plugins=64)
    results = [compile_topology(data, plugins, reg, uid="u", verdicts=memo) for _ in range(3)]
    fresh = compile_topology(data, plugins, reg, uid="u")
    assert fresh.compiled is not None
    for result in results:
        assert result.compiled is not None and result.compiled.revision == fresh.compiled.revision
        assert result.diagnostics == fresh.diagnostics
    assert memo.checked == 3 and memo.reused == 3 * 32 - 3


def test_a_bounded_memo_forgets_the_oldest_plugins_and_reads() -> None:
    plugin_a = _plugin("call.config.mode == 'a'", "false")
    plugin_b = _plugin("call.config.mode == 'b'", "false")
    reg = registry()
    memo = CleanVerdicts(kept_plugins=1, kept_reads=1)

    def config(mode: str) -> dict[str, Any]:
        normalised, problems = validate_config(
            plugin_a.descriptor.spec.config_schema,
            {"ifName": "net1", "vlanId": 100, "up": True, "mode": mode},
        )
        assert not problems
        return normalised

    for plugin, mode in ((plugin_a, "a"), (plugin_a, "a"), (plugin_a, "b"), (plugin_a, "a")):
        assert memo.check(plugin, reg, config(mode)) == []
    assert (memo.checked, memo.reused) == (3, 1)  # one read set kept: "b" pushed "a" out
    assert memo.check(plugin_b, reg, config("a")) == []  # plugin_a's entry goes
    assert memo.check(plugin_a, reg, config("b")) == []
    assert (memo.checked, memo.reused) == (5, 1)
