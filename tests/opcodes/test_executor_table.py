"""default_executors(): the one table of native executors the agent, tests and benchmarks use."""

from dmn.opcodes.executor_table import default_executors
from dmn.opcodes.registry import default_registry


def test_every_executor_implements_a_registered_spec() -> None:
    registry = default_registry()
    table = default_executors()
    assert table, "no executors at all"
    for name in table:
        assert registry.get(name) is not None, name


def test_the_built_families_are_present() -> None:
    table = default_executors()
    for name in (
        "linux/link-move/v1",
        "linux/create-macvlan/v1",
        "share/hold-parent/v1",
        "sriov/vf-configure/v1",
        "representor/configure/v1",
        "bridge/port-attach/v1",
        "bridge/port-vlan/v1",
        "bridge/shared-uplink-vlan/v1",
        "ovs/port-attach/v1",
    ):
        assert name in table


def test_each_call_returns_a_caller_owned_mapping() -> None:
    first = default_executors()
    first.clear()
    assert default_executors()
