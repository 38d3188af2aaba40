"""What sysctl/interface/v1 and ethtool/features/v1 refuse, and how: unknown sysctl keys,
out-of-range values and path-like strings are answered with reason codes at every layer that
sees them — ``dmn lint`` (pointing at the field), the executors' re-validation of a bound
payload, and the kernel access layer's path rule — never with a traceback, and never become
part of a path."""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.host.errors import HostError
from dmn.host.sysctl import FAMILIES, PROC_SYS_NET, InterfaceSysctl
from dmn.interpreter.lint import lint_paths
from dmn.opcodes.ethtool import features as ethtool_executor
from dmn.opcodes.ethtool.specs import FEATURE_NAMES
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.opcodes.sysctl import interface_sysctl
from dmn.opcodes.sysctl.specs import SYSCTL_KEYS, InterfaceSysctlParameters

pytestmark = pytest.mark.property

HOST_TUNED = Path(__file__).parents[1] / "kernel/plugins/host-tuned/v1"
PATH_LIKE = ["../../kernel/core_pattern", "rp_filter/../all", "/proc/sys", "all", ".", "..", ""]

_text = st.text(max_size=24) | st.sampled_from([*PATH_LIKE, "rp_filter", "ipv4", "ipv6"])
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)


@given(family=_text, key=_text)
@settings(max_examples=300, deadline=None)
def test_a_sysctl_key_is_allowlist_shaped_or_refused_with_its_code(family: str, key: str) -> None:
    try:
        made = InterfaceSysctl(family, key)
    except HostError as exc:
        assert exc.code == "E_SYSCTL_KEY"
        return
    assert made.family in FAMILIES
    assert "/" not in made.key and made.key not in (".", "..")


@given(name=_text)
@settings(max_examples=300, deadline=None)
def test_a_link_name_never_leaves_its_conf_directory(name: str) -> None:
    key = InterfaceSysctl("ipv4", "rp_filter")
    try:
        path = key.path(name)
    except HostError as exc:
        assert exc.code == "E_SYSCTL_KEY"
        return
    assert path.parent.parent == PROC_SYS_NET / "ipv4" / "conf"
    assert path.parent.name == name and path.name == "rp_filter"
    assert name not in ("all", "default", ".", "..")
    assert PurePosixPath(*path.parts) == path and len(path.parts) == 8


def test_the_allowlist_is_the_model_and_every_key_passes_the_kernel_layers_rule() -> None:
    assert set(SYSCTL_KEYS) == set(InterfaceSysctlParameters.model_fields)
    for family, key in SYSCTL_KEYS.values():
        InterfaceSysctl(family, key)
    assert len(set(SYSCTL_KEYS.values())) == len(SYSCTL_KEYS)


def _ctx(parameters: Any) -> EffectContext:
    return EffectContext("op", "e", {}, parameters)


@given(payload=st.dictionaries(st.sampled_from(sorted(SYSCTL_KEYS)) | _text, _json, max_size=4))
@settings(max_examples=300, deadline=None)
def test_a_bound_sysctl_payload_is_allowlisted_keys_or_refused(payload: dict[str, Any]) -> None:
    try:
        wanted = interface_sysctl.wanted(_ctx(payload))
    except ExecutorError as exc:
        assert exc.code == "E_PARAM_TYPE"
        return
    assert wanted
    allowed = {InterfaceSysctl(f, k) for f, k in SYSCTL_KEYS.values()}
    assert set(wanted) <= allowed
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in wanted.values())


_features = st.dictionaries(st.sampled_from(FEATURE_NAMES) | _text, _json, max_size=4)


@given(payload=st.dictionaries(st.just("features") | _text, _features | _json, max_size=2))
@settings(max_examples=300, deadline=None)
def test_a_bound_features_payload_is_allowlisted_names_or_refused(payload: dict[str, Any]) -> None:
    try:
        wanted = ethtool_executor.wanted(_ctx(payload))
    except ExecutorError as exc:
        assert exc.code == "E_PARAM_TYPE"
        return
    assert wanted and set(wanted) <= set(FEATURE_NAMES)
    assert all(isinstance(v, bool) for v in wanted.values())


# ------------------------------------------------------------------ dmn lint, at the field


def _plugin_with(tmp: Path, effect: str, parameters: dict[str, Any]) -> Path:
    """host-tuned with the literal parameters of one connect effect replaced."""
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(HOST_TUNED, tmp)
    connect = tmp / "connect.yaml"
    doc = yaml.safe_load(connect.read_text())
    for entry in doc["effects"]:
        if entry["id"] == effect:
            entry["parameters"] = parameters
            entry.pop("parameterBindings", None)
    connect.write_text(yaml.safe_dump(doc, sort_keys=False))
    return connect


def _errors(connect: Path) -> list[Any]:
    result = lint_paths([str(connect.parent)], include_builtins=False)
    return [d for d in result.diagnostics if d.severity.value == "error"]


def _line_of(connect: Path, text: str) -> int:
    for number, line in enumerate(connect.read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(text)


def test_lint_points_at_an_unknown_sysctl_key(tmp_path: Path) -> None:
    connect = _plugin_with(tmp_path / "p", "sysctl", {"ipv4RpFilter": 2, "rp_filter": 1})
    errors = _errors(connect)
    assert [d.code.value for d in errors] == ["E_UNKNOWN_FIELD"], errors
    (found,) = errors
    assert "rp_filter" in found.message and "sysctl/interface/v1" in found.message
    assert found.file.endswith("connect.yaml")
    assert found.line == _line_of(connect, "rp_filter: 1")
    assert "parameters" in found.path and "rp_filter" in found.path


def test_lint_refuses_out_of_range_values_and_path_like_names(tmp_path: Path) -> None:
    cases = [
        ("sysctl", {"ipv4RpFilter": 3}, "E_PARAM_TYPE"),
        ("sysctl", {"ipv4ArpIgnore": 5}, "E_PARAM_TYPE"),
        ("sysctl", {"ipv6Disable": 1}, "E_PARAM_TYPE"),
        ("sysctl", {"../../kernel/core_pattern": 1}, "E_UNKNOWN_FIELD"),
        ("offloads", {"features": {"../../../proc/sys": True}}, "E_PARAM_TYPE"),
        ("offloads", {"features": {"tso": True}}, "E_PARAM_TYPE"),
        ("offloads", {"features": {}}, "E_PARAM_TYPE"),
    ]
    for i, (effect, parameters, code) in enumerate(cases):
        connect = _plugin_with(tmp_path / f"p{i}", effect, parameters)
        errors = _errors(connect)
        assert [d.code.value for d in errors] == [code], (parameters, errors)
        assert errors[0].file.endswith("connect.yaml") and errors[0].line > 1


@given(key=_text, value=_json)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_lint_answers_any_sysctl_parameter_with_diagnostics(
    tmp_path: Path, key: str, value: Any
) -> None:
    connect = _plugin_with(tmp_path / "p", "sysctl", {key: value})
    errors = _errors(connect)
    if key in SYSCTL_KEYS:
        try:
            InterfaceSysctlParameters.model_validate({key: value}, strict=True)
        except ValueError:
            assert errors
        return
    assert errors and all(d.code.value in ("E_UNKNOWN_FIELD", "E_SCHEMA") for d in errors), errors
