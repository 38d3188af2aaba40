"""The lab NRI runtime's required-plugin check, as containerd's NRI default validator does it.

The pure rule first (effective annotation lookup, toleration, names with and without the
index), then the runtime: a container of a Pod that requires our plugin is refused while
the plugin is not registered and created once it is; a Pod that tolerates missing plugins
or requires nothing is never held.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dmn.lab.runtime.nri_runtime import HookFailed, LabContainer, LabNriRuntime, LabPod
from dmn.lab.runtime.required_plugins import (
    REQUIRED_PLUGINS,
    RequiredPluginCheck,
    effective_annotation,
    present_names,
)
from tests.protocols.nri_fixtures import RELAXED, WAIT, RecordingHandler
from tests.protocols.test_nri_recovery import _plugin

TOLERATE = "tolerate-missing-nri-plugins.noderesource.dev"
CHECK = RequiredPluginCheck(tolerate_annotation=TOLERATE)
OURS = {f"{REQUIRED_PLUGINS}/pod": '["dra-multi-network"]'}


def test_effective_annotation_takes_the_container_then_the_pod_then_the_bare_key() -> None:
    a = {"k": "bare", "k/pod": "pod", "k/container.app": "app"}
    assert effective_annotation(a, "k", "app") == "app"
    assert effective_annotation(a, "k", "side") == "pod"
    assert effective_annotation({"k": "bare"}, "k", "app") == "bare"
    assert effective_annotation({}, "k", "app") is None


def test_present_names_are_the_full_name_and_the_name() -> None:
    assert present_names(["10-dra-multi-network", "00-default-validator"]) == {
        "10-dra-multi-network",
        "dra-multi-network",
        "00-default-validator",
        "default-validator",
    }


@pytest.mark.parametrize(
    ("annotations", "present", "refused"),
    [
        (OURS, set(), "required plugin 'dra-multi-network' not present"),
        (OURS, {"dra-multi-network"}, None),
        ({f"{REQUIRED_PLUGINS}/pod": "- dra-multi-network\n- other"}, set(), "plugins"),
        ({}, set(), None),
        ({**OURS, f"{TOLERATE}/pod": "true"}, set(), None),
        ({**OURS, TOLERATE: "false"}, set(), "not present"),
        ({**OURS, TOLERATE: "yes"}, set(), "invalid"),
        ({f"{REQUIRED_PLUGINS}/pod": "{a: b}"}, set(), "invalid"),
        # the container-scoped key decides for its container, over the Pod's
        ({**OURS, f"{REQUIRED_PLUGINS}/container.app": "[]"}, set(), None),
    ],
)
def test_rule(annotations: dict[str, str], present: set[str], refused: str | None) -> None:
    got = CHECK.refusal(annotations, "app", present)
    if refused is None:
        assert got is None
    else:
        assert got is not None and refused in got


def test_node_wide_requirement_applies_to_every_pod() -> None:
    check = RequiredPluginCheck(required=("dra-multi-network",), tolerate_annotation=TOLERATE)
    assert check.refusal({}, "app", set()) is not None
    assert check.refusal({TOLERATE: "true"}, "app", set()) is None


def test_runtime_holds_the_container_until_the_plugin_registers(tmp_path: Path) -> None:
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, required_plugins=CHECK, **RELAXED).start()
    thread = None
    try:
        ours = LabPod("a", "uid-a", "a", "ns", "/run/netns/a", annotations=dict(OURS))
        plain = LabPod("b", "uid-b", "b", "ns", "/run/netns/b")
        agent = LabPod("c", "uid-c", "c", "ns", "/run/netns/c", annotations={TOLERATE: "true"})
        for pod in (ours, plain, agent):
            runtime.run_pod_sandbox(pod)  # no plugin: the sandbox starts anyway
        with pytest.raises(HookFailed, match="required plugin 'dra-multi-network' not present"):
            runtime.create_container("a", LabContainer("a1", "a", "app"))
        assert [e.kind for e in runtime.events] == ["validator"]
        runtime.create_container("b", LabContainer("b1", "b", "app"))
        runtime.create_container("c", LabContainer("c1", "c", "app"))
        handler = RecordingHandler()
        thread = _plugin(sock, handler)
        assert runtime.wait_ready(1, WAIT)
        runtime.create_container("a", LabContainer("a2", "a", "app"))
        assert "a2" in runtime.containers and "a1" not in runtime.containers
    finally:
        if thread is not None:
            thread.stop()
        runtime.stop()
