"""DRAPlugin services (v1 and v1beta1) over one version-agnostic core.

The core guarantees the kubelet contract: every claim UID of a request gets an entry,
failures are per-claim ``error`` strings, never a batch RPC error. While draining (graceful
stop) new prepares are answered per claim with a retryable error, unprepares are still
served, and in-flight calls are awaited.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from dmn.agent.kubelet.handler import ClaimRef, DraHandler, PrepareResult, UnprepareResult
from dmn.agent.protos import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc

log = logging.getLogger(__name__)

SHUTTING_DOWN = "dra-multi-network node agent is shutting down; retry"


class DraCore:
    def __init__(self, handler: DraHandler) -> None:
        self.handler = handler
        self._cond = threading.Condition()
        self._in_flight = 0
        self.draining = False

    def _claims(self, claims: Sequence[Any]) -> tuple[list[ClaimRef], dict[str, str]]:
        """Dedupe by UID; claims with no UID get an error under key ""."""
        refs: dict[str, ClaimRef] = {}
        bad: dict[str, str] = {}
        for c in claims:
            if not c.uid:
                bad[""] = f"claim {c.namespace}/{c.name} has no uid"
                continue
            refs.setdefault(c.uid, ClaimRef(c.namespace, c.uid, c.name))
        return list(refs.values()), bad

    def _run(
        self,
        op: str,
        refs: list[ClaimRef],
        call: Callable[[list[ClaimRef]], Mapping[str, Any]],
        failed: Callable[[str], Any],
    ) -> dict[str, Any]:
        start = time.monotonic()
        try:
            got = dict(call(refs)) if refs else {}
        except Exception as exc:
            log.exception("dra %s failed claims=%d", op, len(refs))
            got = {r.uid: failed(f"{op} failed: {exc}") for r in refs}
        out: dict[str, Any] = {}
        for ref in refs:
            res = got.get(ref.uid)
            if res is None:
                res = failed(f"{op}: driver returned no result for claim {ref.uid}")
            out[ref.uid] = res
        errors = sum(1 for r in out.values() if r.error)
        log.info(
            "dra %s claims=%d errors=%d duration_ms=%.1f",
            op,
            len(refs),
            errors,
            (time.monotonic() - start) * 1000,
        )
        return out

    def prepare(self, claims: Sequence[Any]) -> dict[str, PrepareResult]:
        refs, bad = self._claims(claims)
        with self._cond:
            if self.draining:
                out = {r.uid: PrepareResult(error=SHUTTING_DOWN) for r in refs}
                out.update({k: PrepareResult(error=v) for k, v in bad.items()})
                return out
            self._in_flight += 1
        try:
            out = self._run("prepare", refs, self.handler.prepare, lambda e: PrepareResult(error=e))
        finally:
            self._done()
        out.update({k: PrepareResult(error=v) for k, v in bad.items()})
        return out

    def unprepare(self, claims: Sequence[Any]) -> dict[str, UnprepareResult]:
        refs, bad = self._claims(claims)
        with self._cond:
            self._in_flight += 1
        try:
            out = self._run(
                "unprepare", refs, self.handler.unprepare, lambda e: UnprepareResult(error=e)
            )
        finally:
            self._done()
        out.update({k: UnprepareResult(error=v) for k, v in bad.items()})
        return out

    def _done(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def drain(self, timeout: float) -> bool:
        """Refuse new prepares; wait until no call is in flight. True if drained in time."""
        with self._cond:
            self.draining = True
            return self._cond.wait_for(lambda: self._in_flight == 0, timeout)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight


def _prepare_entry(pb: Any, res: PrepareResult, share_ids: bool) -> Any:
    entry = pb.NodePrepareResourceResponse()
    if res.error:
        entry.error = res.error
        return entry
    for dev in res.devices:
        d = entry.devices.add(
            request_names=list(dev.request_names),
            pool_name=dev.pool_name,
            device_name=dev.device_name,
            cdi_device_ids=list(dev.cdi_device_ids),
        )
        if share_ids and dev.share_id is not None:
            d.share_id = dev.share_id
    return entry


def _prepare_response(pb: Any, results: dict[str, PrepareResult], share_ids: bool) -> Any:
    """One entry per claim; a result that cannot be encoded fails only its own claim."""
    resp = pb.NodePrepareResourcesResponse()
    for uid, res in results.items():
        try:
            entry = _prepare_entry(pb, res, share_ids)
        except Exception as exc:
            log.exception("dra prepare result not encodable claim_uid=%s", uid)
            entry = pb.NodePrepareResourceResponse(error=f"prepare: invalid result: {exc}")
        resp.claims[uid].CopyFrom(entry)
    return resp


def _unprepare_response(pb: Any, results: dict[str, UnprepareResult]) -> Any:
    resp = pb.NodeUnprepareResourcesResponse()
    for uid, res in results.items():
        resp.claims[uid].error = res.error
    return resp


class DraV1Servicer(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, core: DraCore) -> None:
        self.core = core

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _prepare_response(dra_v1_pb2, self.core.prepare(request.claims), share_ids=True)

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _unprepare_response(dra_v1_pb2, self.core.unprepare(request.claims))


class DraV1beta1Servicer(dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def __init__(self, core: DraCore) -> None:
        self.core = core

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        results = self.core.prepare(request.claims)
        return _prepare_response(dra_v1beta1_pb2, results, share_ids=False)

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _unprepare_response(dra_v1beta1_pb2, self.core.unprepare(request.claims))
