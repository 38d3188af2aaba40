"""A DRA allocator with kube-scheduler's structured-parameters semantics for what we use.

Entry points: :class:`Allocator` — ``allocate(claims) -> [AllocationResult]`` (all claims
of one Pod, all or nothing), ``release(claim_uid)``, ``restore(claim_uid, allocation)``
(scheduler restart: rebuild accounting from allocated claims) and ``set_slices`` /
``set_class`` (the live API view).

Semantics implemented (resource.k8s.io/v1):

* pools: per (driver, pool name) only the slices of the highest generation count; slices
  for other nodes are ignored; an incomplete pool (fewer slices than
  ``resourceSliceCount``) or an invalid one (duplicate device names) is not allocated from;
* DeviceClass selectors, then request selectors, CEL (:mod:`dmn.api.device_selectors`),
  evaluated lazily in search order exactly where upstream's ``allocateOne`` evaluates them: a device
  already in use is skipped before any selector runs, results are cached per (request,
  device), and the search stops at the first full solution. A CEL compile or runtime
  error on a device the search reaches aborts the whole attempt with that error (upstream
  returns it from ``Allocate``); an erroring device the search never reaches does not;
* ``exactly`` requests with ``allocationMode: ExactCount`` (default count 1);
* ``matchAttribute`` / ``distinctAttribute`` constraints over the listed requests (all
  when empty); a device without the attribute fails the constraint;
* a device without ``allowMultipleAllocations`` is allocated at most once (across claims
  and within a claim);
* ``allowMultipleAllocations`` devices: every result gets a fresh share ID and consumed
  capacity per ``requestPolicy`` (default, validValues rounding up, validRange) and the
  sum per capacity never exceeds its value;
* shared counters: a device's ``consumesCounters`` are drawn from its counter sets while
  it is allocated — once per device, also for a shared device with many shares — and
  never beyond the counter values;
* compatibility groups: devices drawing from one counter set co-allocate only while the
  intersection of all their groups is non-empty; a device with no groups only with other
  group-less devices. Already-allocated devices contribute the groups their *current*
  slice declares (read live, as upstream) — a declaration withdrawn from the slices stops
  constraining, which is why the node agent retains declarations until drained;
* allocations stay counted until :meth:`Allocator.release`.

Knowing deviations from kube-scheduler are listed in ``lab/allocator/README.md``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dmn.api.device_selectors import (
    SelectorCache,
    SelectorError,
    device_variables,
    qualified_attribute,
)
from dmn.api.published_pools import usable_slices
from dmn.api.quantity import format_quantity, parse_quantity

log = logging.getLogger(__name__)

DeviceKey = tuple[str, str, str]  # driver, pool, device
#: resource.k8s.io/v1 AllocationResultsMaxSize: results one claim's allocation may hold.
MAX_RESULTS_PER_CLAIM = 32


class AllocationError(Exception):
    """A claim that cannot be allocated; ``reason`` is a stable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True)
class Candidate:
    key: DeviceKey
    device: Mapping[str, Any]
    counter_sets: Mapping[str, Mapping[str, Fraction]]  # pool counter sets, by name

    @property
    def driver(self) -> str:
        return self.key[0]

    @property
    def shared(self) -> bool:
        return bool(self.device.get("allowMultipleAllocations", False))

    def consumptions(self) -> list[Mapping[str, Any]]:
        return list(self.device.get("consumesCounters") or ())


@dataclass
class _Request:
    claim_index: int
    name: str
    """The result's request name: the claim's request, or ``<request>/<subrequest>`` for
    one alternative of a ``firstAvailable`` list."""
    class_name: str
    selectors: list[str]
    count: int
    capacity: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass
class _State:
    """Accounting during one attempt (committed allocations plus tentative picks)."""

    exclusive: set[DeviceKey] = field(default_factory=set)
    consumed_capacity: dict[DeviceKey, dict[str, Fraction]] = field(default_factory=dict)
    share_count: dict[DeviceKey, int] = field(default_factory=dict)


class Allocator:
    def __init__(
        self,
        node_name: str,
        slices: Sequence[Mapping[str, Any]] = (),
        classes: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.node_name = node_name
        self._cel = SelectorCache()
        self._classes: dict[str, Mapping[str, Any]] = {}
        for c in classes:
            self.set_class(c)
        self._candidates: list[Candidate] = []
        self._by_key: dict[DeviceKey, Candidate] = {}
        self._counters: dict[tuple[str, str, str], dict[str, Fraction]] = {}
        self.allocations: dict[str, dict[str, Any]] = {}
        self.set_slices(slices)

    # -- API view ----------------------------------------------------------------------

    def set_class(self, device_class: Mapping[str, Any]) -> None:
        self._classes[device_class["metadata"]["name"]] = device_class

    def delete_class(self, name: str) -> None:
        self._classes.pop(name, None)

    def set_slices(self, slices: Sequence[Mapping[str, Any]]) -> None:
        """Replace the slice view: this node's slices of the pools upstream allocates from
        (:func:`dmn.api.published_pools.usable_slices`: newest generation, complete, valid)."""
        current = usable_slices(s for s in slices if self._for_node(s))
        counters: dict[tuple[str, str, str], dict[str, Fraction]] = {}
        for s in current:
            spec = s["spec"]
            for cs in spec.get("sharedCounters") or ():
                counters[(spec["driver"], spec["pool"]["name"], cs["name"])] = {
                    name: parse_quantity(c["value"]) for name, c in cs["counters"].items()
                }
        candidates: list[Candidate] = []
        for s in current:
            spec = s["spec"]
            driver, pool = spec["driver"], spec["pool"]["name"]
            pool_sets = {k[2]: v for k, v in counters.items() if k[:2] == (driver, pool)}
            for d in spec.get("devices") or ():
                candidates.append(Candidate((driver, pool, d["name"]), d, pool_sets))
        self._candidates = candidates
        self._by_key = {c.key: c for c in candidates}
        self._counters = counters

    def _for_node(self, s: Mapping[str, Any]) -> bool:
        spec = s["spec"]
        return bool(spec.get("allNodes")) or spec.get("nodeName") == self.node_name

    # -- committed state ---------------------------------------------------------------

    def _committed(self) -> _State:
        state = _State()
        for allocation in self.allocations.values():
            for r in allocation["devices"]["results"]:
                key = (r["driver"], r["pool"], r["device"])
                if r.get("shareID"):
                    used = state.consumed_capacity.setdefault(key, {})
                    for name, q in (r.get("consumedCapacity") or {}).items():
                        used[name] = used.get(name, Fraction(0)) + parse_quantity(q)
                    state.share_count[key] = state.share_count.get(key, 0) + 1
                else:
                    state.exclusive.add(key)
        return state

    def allocated_devices(self) -> set[DeviceKey]:
        s = self._committed()
        return s.exclusive | set(s.share_count)

    def release(self, claim_uid: str) -> None:
        self.allocations.pop(claim_uid, None)

    def restore(self, claim_uid: str, allocation: Mapping[str, Any]) -> None:
        """Re-admit an allocation read back from a claim's status (scheduler restart)."""
        self.allocations[claim_uid] = dict(allocation)

    # -- allocation --------------------------------------------------------------------

    def allocate_one(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        return self.allocate([claim])[0]

    def allocate(self, claims: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Allocate all claims together or raise :class:`AllocationError`."""
        requests: list[_Request] = []
        groups: list[list[int]] = []  # per claim request: its alternatives (indexes)
        constraints: list[list[tuple[str, str, set[str]]]] = []
        for ci, claim in enumerate(claims):
            uid = claim["metadata"]["uid"]
            if uid in self.allocations:
                raise AllocationError("AlreadyAllocated", f"claim {uid} is already allocated")
            spec = claim.get("spec", {}).get("devices", {})
            names = []
            wanted = 0
            for r in spec.get("requests") or ():
                alternatives = self._alternatives(ci, r)
                groups.append(list(range(len(requests), len(requests) + len(alternatives))))
                requests.extend(alternatives)
                names.append(r["name"])
                wanted += max(a.count for a in alternatives)
            if wanted > MAX_RESULTS_PER_CLAIM:
                raise AllocationError(
                    "TooManyDevices",
                    f"claim {uid}: number of requested devices {wanted} exceeds the claim "
                    f"limit of {MAX_RESULTS_PER_CLAIM}",
                )
            cons: list[tuple[str, str, set[str]]] = []
            for c in spec.get("constraints") or ():
                scope = set(c.get("requests") or names)
                if c.get("matchAttribute"):
                    cons.append(("match", c["matchAttribute"], scope))
                elif c.get("distinctAttribute"):
                    cons.append(("distinct", c["distinctAttribute"], scope))
                else:
                    raise AllocationError("UnsupportedConstraint", f"claim {uid}: {c!r}")
            constraints.append(cons)

        state = self._committed()
        picks: list[tuple[int, Candidate, dict[str, Fraction]]] = []
        selectable: dict[tuple[int, DeviceKey], bool] = {}

        def search(gi: int) -> bool:
            """Requests in order; a firstAvailable request tries its alternatives in order
            and keeps the first with which every later request can be allocated too."""
            if gi == len(groups):
                return True
            return any(take(gi, ri, requests[ri].count) for ri in groups[gi])

        def take(gi: int, ri: int, remaining: int) -> bool:
            if remaining == 0:
                return search(gi + 1)
            request = requests[ri]
            for cand in self._candidates:
                if not cand.shared and cand.key in state.exclusive:
                    continue  # "in use" is checked before selectors, as upstream
                matches = selectable.get((ri, cand.key))
                if matches is None:
                    matches = _tolerated(request, cand) and self._selectable(request, cand)
                    selectable[(ri, cand.key)] = matches
                if not matches:
                    continue
                consumed = self._try_take(cand, request, state, picks, constraints, requests)
                if consumed is None:
                    continue
                picks.append((ri, cand, consumed))
                undo = self._apply(cand, consumed, state)
                if take(gi, ri, remaining - 1):
                    return True
                undo()
                picks.pop()
            return False

        if not search(0):
            raise AllocationError(
                "Unschedulable",
                "cannot allocate all requests of "
                + ", ".join(c["metadata"]["uid"] for c in claims),
            )
        chosen = {ri for ri, _, _ in picks}
        results: list[dict[str, Any]] = []
        for ci, claim in enumerate(claims):
            devices = []
            for ri, cand, consumed in picks:
                if requests[ri].claim_index != ci:
                    continue
                entry: dict[str, Any] = {
                    "request": requests[ri].name,
                    "driver": cand.key[0],
                    "pool": cand.key[1],
                    "device": cand.key[2],
                }
                if cand.shared:
                    entry["shareID"] = str(uuid.uuid4())
                    entry["consumedCapacity"] = {k: format_quantity(v) for k, v in consumed.items()}
                devices.append(entry)
            allocation = {
                "devices": {
                    "results": devices,
                    "config": self._config(claim, [requests[i] for i in sorted(chosen)], ci),
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": [self.node_name],
                                }
                            ]
                        }
                    ]
                },
            }
            self.allocations[claim["metadata"]["uid"]] = allocation
            results.append(allocation)
            log.info("allocated claim=%s devices=%d", claim["metadata"]["uid"], len(devices))
        return results

    # -- pieces ------------------------------------------------------------------------

    def _alternatives(self, claim_index: int, r: Mapping[str, Any]) -> list[_Request]:
        """One request (``exactly``), or the ordered alternatives of ``firstAvailable``
        (each named ``<request>/<subrequest>``, as upstream names the result)."""
        if "firstAvailable" in r:
            subs = r["firstAvailable"] or ()
            if not subs:
                raise AllocationError("InvalidRequest", f"request {r['name']}: no alternatives")
            return [self._request(claim_index, f"{r['name']}/{sub['name']}", sub) for sub in subs]
        exactly = r.get("exactly")
        if exactly is None:
            raise AllocationError("InvalidRequest", f"request {r['name']}: no exactly")
        return [self._request(claim_index, r["name"], exactly)]

    def _request(self, claim_index: int, name: str, exactly: Mapping[str, Any]) -> _Request:
        mode = exactly.get("allocationMode", "ExactCount")
        if mode != "ExactCount":
            raise AllocationError("Unsupported", f"request {name}: allocationMode {mode}")
        if exactly.get("adminAccess"):
            raise AllocationError("Unsupported", f"request {name}: adminAccess")
        class_name = exactly["deviceClassName"]
        if class_name not in self._classes:
            raise AllocationError("DeviceClassNotFound", f"device class {class_name} not found")
        return _Request(
            claim_index=claim_index,
            name=name,
            class_name=class_name,
            selectors=[s["cel"]["expression"] for s in exactly.get("selectors") or ()],
            count=int(exactly.get("count", 1)),
            capacity=dict((exactly.get("capacity") or {}).get("requests") or {}),
            tolerations=tuple(exactly.get("tolerations") or ()),
        )

    def _selectable(self, request: _Request, cand: Candidate) -> bool:
        """Class selectors, then request selectors, for one device; the first false stops.

        A compile or runtime error raises :class:`AllocationError` with the selector's
        reason: the whole attempt fails, as upstream's ``selectorsMatch`` error does."""
        cls = self._classes[request.class_name]
        class_selectors = [s["cel"]["expression"] for s in cls["spec"].get("selectors") or ()]
        try:
            variables = device_variables(cand.driver, cand.device)
        except SelectorError as exc:
            raise AllocationError(exc.reason, f"device {cand.key[2]}: {exc}") from exc
        for origin, expressions in (
            (f"class {request.class_name}", class_selectors),
            (f"request {request.name}", request.selectors),
        ):
            for i, expression in enumerate(expressions):
                try:
                    if not self._cel.get(expression).matches(variables):
                        return False
                except SelectorError as exc:
                    raise AllocationError(
                        exc.reason, f"{origin}: selector #{i}: device {cand.key[2]}: {exc}"
                    ) from exc
        return True

    def _config(
        self, claim: Mapping[str, Any], requests: list[_Request], ci: int
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for r in requests:
            if r.claim_index != ci:
                continue
            for c in self._classes[r.class_name]["spec"].get("config") or ():
                out.append({"source": "FromClass", "requests": [r.name], **c})
        for c in claim.get("spec", {}).get("devices", {}).get("config") or ():
            out.append({"source": "FromClaim", **c})
        return out

    def _capacity_need(self, cand: Candidate, request: _Request) -> dict[str, Fraction] | None:
        """Consumed capacity for one share, or None when the request violates a policy."""
        need: dict[str, Fraction] = {}
        for name, cap in (cand.device.get("capacity") or {}).items():
            value = parse_quantity(cap["value"])
            policy = cap.get("requestPolicy")
            asked = request.capacity.get(name)
            if policy is None:
                amount = parse_quantity(asked) if asked is not None else value
            else:
                amount = parse_quantity(asked if asked is not None else policy["default"])
                valid = [parse_quantity(v) for v in policy.get("validValues") or ()]
                if valid:
                    fitting = [v for v in valid if v >= amount]
                    if not fitting:
                        return None
                    amount = min(fitting)
                rng = policy.get("validRange")
                if rng:
                    low = parse_quantity(rng["min"])
                    amount = max(amount, low)
                    if "max" in rng and amount > parse_quantity(rng["max"]):
                        return None
                    if "step" in rng:
                        step = parse_quantity(rng["step"])
                        steps = -(-(amount - low) // step)
                        amount = low + steps * step
            need[name] = amount
        for name in request.capacity:
            if name not in need:
                return None  # asks for a capacity the device does not have
        return need

    def _try_take(
        self,
        cand: Candidate,
        request: _Request,
        state: _State,
        picks: list[tuple[int, Candidate, dict[str, Fraction]]],
        constraints: list[list[tuple[str, str, set[str]]]],
        requests: list[_Request],
    ) -> dict[str, Fraction] | None:
        key = cand.key
        consumed: dict[str, Fraction] = {}
        if cand.shared:
            need = self._capacity_need(cand, request)
            if need is None:
                return None
            used = state.consumed_capacity.get(key, {})
            for name, amount in need.items():
                total = parse_quantity(cand.device["capacity"][name]["value"])
                if used.get(name, Fraction(0)) + amount > total:
                    return None
            consumed = need
        elif key in state.exclusive:
            return None
        elif request.capacity:
            return None  # capacity requests need a multi-allocatable device
        if not self._counters_fit(cand, state):
            return None
        if not self._constraints_hold(cand, request, picks, constraints, requests):
            return None
        return consumed

    def _active_devices(self, state: _State) -> list[Candidate]:
        """Allocated devices that the current slices still declare (read live)."""
        keys = state.exclusive | {k for k, n in state.share_count.items() if n > 0}
        return [self._by_key[k] for k in sorted(keys) if k in self._by_key]

    def _counters_fit(self, cand: Candidate, state: _State) -> bool:
        if state.share_count.get(cand.key, 0) > 0:
            return True  # a shared device draws its counters once, already drawn
        active = self._active_devices(state)
        for consumption in cand.consumptions():
            set_name = consumption["counterSet"]
            available = cand.counter_sets.get(set_name)
            if available is None:
                return False  # counter set not (yet) published: cannot prove availability
            used: dict[str, Fraction] = {}
            groups_on_set: list[set[str]] = []
            for other in active:
                if other.key[:2] != cand.key[:2]:
                    continue
                for oc in other.consumptions():
                    if oc["counterSet"] != set_name:
                        continue
                    for n, c in oc["counters"].items():
                        used[n] = used.get(n, Fraction(0)) + parse_quantity(c["value"])
                    groups_on_set.append(set(oc.get("compatibilityGroups") or ()))
            for n, c in consumption["counters"].items():
                total = available.get(n)
                if total is None:
                    return False
                if used.get(n, Fraction(0)) + parse_quantity(c["value"]) > total:
                    return False
            mine = set(consumption.get("compatibilityGroups") or ())
            if groups_on_set and not _groups_admit(groups_on_set, mine):
                return False
        return True

    def _constraints_hold(
        self,
        cand: Candidate,
        request: _Request,
        picks: list[tuple[int, Candidate, dict[str, Fraction]]],
        constraints: list[list[tuple[str, str, set[str]]]],
        requests: list[_Request],
    ) -> bool:
        for kind, attribute, scope in constraints[request.claim_index]:
            if not _in_scope(request, scope):
                continue
            value = qualified_attribute(cand.driver, cand.device, attribute)
            if value is None:
                return False
            for ri, other, _ in picks:
                r = requests[ri]
                if r.claim_index != request.claim_index or not _in_scope(r, scope):
                    continue
                theirs = qualified_attribute(other.driver, other.device, attribute)
                if kind == "match" and theirs != value:
                    return False
                if kind == "distinct" and theirs == value:
                    return False
        return True

    def _apply(
        self, cand: Candidate, consumed: dict[str, Fraction], state: _State
    ) -> Callable[[], None]:
        key = cand.key
        if cand.shared:
            used = state.consumed_capacity.setdefault(key, {})
            for name, amount in consumed.items():
                used[name] = used.get(name, Fraction(0)) + amount
            state.share_count[key] = state.share_count.get(key, 0) + 1

            def undo_shared() -> None:
                for name, amount in consumed.items():
                    used[name] -= amount
                state.share_count[key] -= 1
                if state.share_count[key] == 0:
                    del state.share_count[key]
                    del state.consumed_capacity[key]

            return undo_shared
        state.exclusive.add(key)

        def undo() -> None:
            state.exclusive.discard(key)

        return undo


#: Taint effects that keep a device from new allocations (``None`` and unknown effects do not).
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Upstream's device toleration match: an effect, if given, must be the taint's; an
    empty key with ``Exists`` matches every key; ``Equal`` (the default) needs the value."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    key = toleration.get("key", "")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(key) and toleration.get("value", "") == taint.get("value", "")


def _tolerated(request: _Request, cand: Candidate) -> bool:
    """Whether every NoSchedule/NoExecute taint of the device is tolerated by the request;
    a tainted device is never allocated otherwise (checked before selectors, as upstream)."""
    return all(
        any(_tolerates(t, taint) for t in request.tolerations)
        for taint in cand.device.get("taints") or ()
        if taint.get("effect") in _BLOCKING_EFFECTS
    )


def _in_scope(request: _Request, scope: set[str]) -> bool:
    """A constraint naming a request covers each of its firstAvailable alternatives."""
    return request.name in scope or request.name.partition("/")[0] in scope


def _groups_admit(existing: list[set[str]], mine: set[str]) -> bool:
    """Upstream rule: the intersection over all co-allocated devices must be non-empty;
    group-less devices co-allocate only with group-less devices."""
    if not mine:
        return all(not g for g in existing)
    if any(not g for g in existing):
        return False
    common = set(mine)
    for g in existing:
        common &= g
    return bool(common)
