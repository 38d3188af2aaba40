"""Property: no sequence of allocations and releases breaks the exclusion model.

Random claims (any standard class, pinned to a random PF or VF of the ConnectX-5, or
unpinned) and releases run against the published reference node; after every step the
allocator's state must satisfy the design §5.5 invariants, read from the personas:

* a PF handoff (kernel or VFIO) excludes every VF of its family and every shared use of it;
* kernel and VFIO handoff of one function never coexist;
* macvlan and ipvlan on one lower endpoint never coexist;
* shares of a shared parent never exceed its ``children`` capacity;
* an exclusive device is allocated at most once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.lab.allocator import AllocationError
from tests.fixtures.policies import claim, on_pci, request, standard_policies
from tests.fixtures.sysfs_layouts import MLX_PF0, MLX_PF1, mlx_vf_address
from tests.scheduler.harness import Harness, make_harness

pytestmark = [pytest.mark.scheduler, pytest.mark.property]

CLASSES = ["pf-kernel", "pf-vfio", "pf-macvlan", "pf-ipvlan", "vf-kernel", "vf-vfio"]
TARGETS = [MLX_PF0, MLX_PF1, *(mlx_vf_address(p, i) for p in (0, 1) for i in range(3)), None]

op = st.one_of(
    st.tuples(st.just("alloc"), st.sampled_from(CLASSES), st.sampled_from(TARGETS)),
    st.tuples(st.just("release"), st.integers(0, 20), st.none()),
)


def check_invariants(h: Harness) -> None:
    personas = h.personas.by_name()  # type: ignore[union-attr]
    uses: list[tuple[str, str, str]] = []  # (pci, pf, persona) per allocation result
    per_device: Counter[str] = Counter()
    for allocation in h.allocator.allocations.values():
        for r in allocation["devices"]["results"]:
            p = personas[r["device"]]
            uses.append((p.pci_address, p.pf_pci_address or p.pci_address, p.persona))
            per_device[r["device"]] += 1
    for name, count in per_device.items():
        p = personas[name]
        limit = p.children.value if p.children else 1
        assert count <= limit, f"{name}: {count} > {limit}"
    for pf in (MLX_PF0, MLX_PF1):
        family = [u for u in uses if u[1] == pf]
        handoff = [u for u in family if u[0] == pf and u[2] in ("kernel", "vfio")]
        if handoff:
            assert len(family) == 1, f"PF handoff shares its family: {family}"
        on_pf = {u[2] for u in family if u[0] == pf}
        assert not {"macvlan", "ipvlan"} <= on_pf
    by_function: dict[str, set[str]] = {}
    for pci, _, persona in uses:
        by_function.setdefault(pci, set()).add(persona)
    for pci, kinds in by_function.items():
        assert not {"kernel", "vfio"} <= kinds, pci


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op, min_size=1, max_size=25))
def test_no_sequence_breaks_exclusion(
    tmp_path: Path, ops: list[tuple[str, object, object]]
) -> None:
    h = make_harness(tmp_path, standard_policies(children=3))
    live: list[str] = []
    for n, (kind, a, b) in enumerate(ops):
        if kind == "alloc":
            selectors = [on_pci(str(b))] if b is not None else None
            uid = f"c{n}"
            try:
                h.allocate(claim(uid, request("r", str(a), selectors=selectors)))
                live.append(uid)
            except AllocationError as exc:
                assert exc.reason == "Unschedulable"
        elif live:
            uid = live.pop(int(str(a)) % len(live))
            h.release(uid)
        check_invariants(h)
