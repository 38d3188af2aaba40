"""A test-only fault point: the node agent SIGKILLs itself once, at one named boundary.

Why: the crash matrices (``tests/kernel``, ``tests/coordinator``) kill a child that runs the
runner; the upstream e2e tests must kill the *real* agent at an exact point while kubelet and
containerd retry for real. This module gives the running agent that one switch and nothing
more.

Contract:

* **Inert unless set.** :func:`from_environment` returns None — no hook at all, the agent
  runs exactly as without this module — unless the agent's own process environment sets
  :data:`FAULT_POINT_ENV`. Nothing a workload, a ResourceClaim, a NetworkTopology or any
  other API object says can set it: it is read once, from the process environment, when the
  agent opens its services; the chart never sets it.
* **One-shot, armed by a file.** With the variable set, a boundary whose name matches its
  value (:func:`fnmatch.fnmatchcase`, so ``after-apply:*pool`` names an effect of any
  operation) kills the agent only while the trigger file :data:`TRIGGER_FILE` exists in the
  agent's state directory (root's, never a workload's). The thread that removes the file is
  the one that kills, so the restarted agent — even with the same environment — runs on.
* **Boundaries.** Every name the runner passes (``after-before-image:<effect>``,
  ``after-apply:<effect>``, ``after-undoing:<effect>``, ... see :mod:`dmn.engine.runner`),
  every coordinator boundary (``coordinator:<name>``) and the IPAM port's own
  (:class:`PoolBoundaries`: ``ipam:before-allocate``, ``ipam:after-allocate``,
  ``ipam:before-release``, ``ipam:after-release``).
* Before the kill it logs ``event=fault-point-kill point=<name>`` (critical), so a test can
  tell where the agent died.
* **Or a stop.** With :data:`FAULT_ACTION_ENV` set to ``stop`` the agent SIGSTOPs itself
  instead (every thread freezes, sockets stay open: a hung agent, as containerd's NRI
  request timeout sees it); the test sends SIGCONT. The log line is then
  ``event=fault-point-stop``. With ``stall`` only the thread at the boundary sleeps
  :data:`STALL_S` seconds (a slow hook in a live agent: the NRI adapter answers the runtime
  at the hook's own deadline meanwhile); the line is ``event=fault-point-stall``.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from dmn.engine.runner import BoundaryHook
from dmn.observability import json_logs
from dmn.opcodes.address_pools import (
    AddressPools,
    ClaimOwner,
    PoolLease,
    PoolRefusal,
    PoolSubnet,
)

log = logging.getLogger(__name__)

FAULT_POINT_ENV = "DMN_TEST_FAULT_POINT"
"""The boundary name (or :mod:`fnmatch` pattern) at which the agent kills itself; test-only."""
FAULT_ACTION_ENV = "DMN_TEST_FAULT_ACTION"
"""``kill`` (the default: SIGKILL), ``stop`` (SIGSTOP) or ``stall`` (this thread sleeps
:data:`STALL_S`) at the fault point; test-only."""
STALL_S = 6.0
"""How long ``stall`` sleeps: longer than containerd's default NRI request timeout (2 s)."""
ACTIONS = ("kill", "stop", "stall")
TRIGGER_FILE = "fault-point.armed"
"""In the agent's state directory: the kill is armed while it exists, and consumes it."""

BEFORE_ALLOCATE = "ipam:before-allocate"  # the intent is durable; no create sent yet
AFTER_ALLOCATE = "ipam:after-allocate"  # the IPAllocation exists; no address on the link
BEFORE_RELEASE = "ipam:before-release"  # undo removed the address; the allocation remains
AFTER_RELEASE = "ipam:after-release"  # the allocation is deleted; the journal not told yet


class FaultPoint:
    """The hook :func:`from_environment` builds: kills this process at ``pattern`` once."""

    def __init__(
        self,
        pattern: str,
        trigger: Path,
        kill: Callable[[], None] = lambda: os.kill(os.getpid(), signal.SIGKILL),
        action: str = "kill",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.pattern = pattern
        self.trigger = trigger
        self._kill = kill
        self.action = action
        self._sleep = sleep

    def __call__(self, name: str) -> None:
        if not fnmatch.fnmatchcase(name, self.pattern):
            return
        try:
            self.trigger.unlink()
        except FileNotFoundError:
            return  # not armed, or another thread consumed it and is killing
        log.critical("event=fault-point-%s point=%s pattern=%s", self.action, name, self.pattern)
        json_logs.flush()  # the writer thread's queue dies with the process otherwise
        if self.action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif self.action == "stall":
            self._sleep(STALL_S)
        else:
            self._kill()


def from_environment(
    state_dir: Path, environ: Mapping[str, str] | None = None
) -> FaultPoint | None:
    """The fault point the agent's environment names, or None (the normal case: inert)."""
    env = os.environ if environ is None else environ
    pattern = env.get(FAULT_POINT_ENV, "").strip()
    if not pattern:
        return None
    action = env.get(FAULT_ACTION_ENV, "kill").strip() or "kill"
    if action not in ACTIONS:
        log.error("event=fault-point-ignored action=%s (one of %s)", action, ", ".join(ACTIONS))
        return None
    log.warning(
        "event=fault-point-configured pattern=%s action=%s trigger=%s (test-only: the agent "
        "%ss itself at this boundary while the trigger file exists)",
        pattern,
        action,
        state_dir / TRIGGER_FILE,
        action,
    )
    return FaultPoint(pattern, state_dir / TRIGGER_FILE, action=action)


class PoolBoundaries:
    """The node's IPPool port with a boundary around each API decision (allocate, release),
    so a fault point can name the moments inside ``ip/pool-addresses``'s apply and undo that
    no journal boundary marks. Only built when a hook is given; passes every call through."""

    def __init__(self, pools: AddressPools, hook: BoundaryHook) -> None:
        self.pools = pools
        self.hook = hook

    def subnets(self, pool: str) -> tuple[PoolSubnet, ...] | PoolRefusal:
        return self.pools.subnets(pool)

    def allocate(
        self, pool: str, family: int, address: str | None, owner: ClaimOwner, operation: str
    ) -> PoolLease | PoolRefusal:
        self.hook(BEFORE_ALLOCATE)
        got = self.pools.allocate(pool, family, address, owner, operation)
        if isinstance(got, PoolLease):
            self.hook(AFTER_ALLOCATE)
        return got

    def release(self, lease: PoolLease) -> PoolRefusal | None:
        self.hook(BEFORE_RELEASE)
        got = self.pools.release(lease)
        self.hook(AFTER_RELEASE)
        return got

    def held(self, owner: ClaimOwner, operation: str) -> tuple[PoolLease, ...]:
        return self.pools.held(owner, operation)
