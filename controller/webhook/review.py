"""Admission decisions for AdmissionReview v1 requests (pure except for plugin lookup).

What is validated (design §4.1, §9.2), always failing closed:

* NetworkTopology create/update — the same compiler the controller runs, against the
  NetworkPlugins in the cluster; every diagnostic becomes a status cause
  (``reason`` = reason code, ``field`` = field path);
* NetworkPlugin create/update — the language checker on the whole plugin; a ``Builtin``
  plugin must carry exactly the shipped contract of its handler (a manifest cannot grant
  a builtin effects it does not implement);
* DeviceExposurePolicy create/update — the strict policy model;
* IPPool create/update — the pool plan's address rules and, when the context can list
  pools, no subnet overlapping another pool's (:func:`dmn.controller.ippool.ippool_diagnostics`);
* NetworkTopologyRevision — written only by the controller's identities; spec immutable;
  on create, ``spec.digest`` must equal the semantic digest recomputed from the spec and
  every locked plugin's ``contractDigest`` must match its captured descriptor;
* DeviceClass — a generated class (managed-by label, or carrying our
  TopologyRootConfiguration) is written or deleted only by the controller's identities;
* Pod create/update (:mod:`.pods`) — a Pod of ours must name our NRI plugin in its
  required-plugins annotation and use one revision per topology; a created one must require
  its revisions' node capability labels in its node affinity and may not be bound by
  ``spec.nodeName`` to a Node without them (:mod:`.pod_affinity`); an update keeps our plugin
  in that annotation. Unlike the rest, a Pod whose facts cannot be read is admitted (with a
  warning): Pod admission must never block Pods that are not ours. :func:`mutate_pod` is
  the mutating half (``POST /mutate-pods``).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dmn.api.cluster import ApiFailure
from dmn.api.identity import DRIVER, LABEL_MANAGED_BY, MANAGED_BY
from dmn.api.served_yaml import POSITION_NOTE, served_document
from dmn.controller.compile.compiler import compile_topology
from dmn.controller.compile.digest import semantic_digest
from dmn.controller.compile.plugin_sources import checked_plugin_object, same_contract
from dmn.controller.ippool import ippool_diagnostics
from dmn.controller.policy_validation import policy_diagnostics
from dmn.controller.webhook import pods
from dmn.controller.webhook.review_shape import request_problem
from dmn.interpreter.canonical_json import sha256_digest
from dmn.interpreter.diagnostics import Code, Diagnostic, has_errors
from dmn.interpreter.loader import Plugin, load_builtin_plugins
from dmn.opcodes.spec import OpcodeRegistry

log = logging.getLogger(__name__)

MAX_CAUSES = 32


@dataclass
class ReviewContext:
    registry: OpcodeRegistry
    #: NetworkPlugins as the cluster has them now (raises if the cluster is unreachable).
    plugins: Callable[[], Mapping[str, Plugin]]
    controller_users: frozenset[str] = frozenset()
    #: IPPools as the cluster has them now, for the overlap check (None: not checked here;
    #: the controller still reports it as the pool's Valid condition).
    pools: Callable[[], Sequence[Mapping[str, Any]]] | None = None
    #: The claims, templates and DeviceClasses a Pod in a namespace names (None: nothing
    #: can be read, every Pod counts as not ours).
    pod_world: Callable[[str, Mapping[str, Any]], pods.World] | None = None


def _position(d: Diagnostic) -> str:
    """`` (networktopology/x:67:15)`` for a diagnostic positioned in a served object."""
    return f" ({d.file}:{d.line}:{d.column})" if d.file else ""


def _deny(uid: str, diagnostics: list[Diagnostic], summary: str) -> dict[str, Any]:
    causes = [
        {"reason": d.code.value, "field": d.path, "message": f"{d.message}{_position(d)}"}
        for d in diagnostics[:MAX_CAUSES]
    ]
    first = diagnostics[0] if diagnostics else None
    message = summary
    if first is not None:
        message += (
            f": {first.code.value} at {first.path or '<object>'}{_position(first)}: {first.message}"
        )
        if len(diagnostics) > 1:
            message += f" (and {len(diagnostics) - 1} more)"
        if first.file:
            message += f" [{POSITION_NOTE}]"
    return {
        "uid": uid,
        "allowed": False,
        "status": {
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": message,
            "details": {"causes": causes},
        },
    }


def _allow(uid: str) -> dict[str, Any]:
    return {"uid": uid, "allowed": True}


def _forbid(uid: str, message: str) -> dict[str, Any]:
    return {
        "uid": uid,
        "allowed": False,
        "status": {"status": "Failure", "code": 403, "reason": "Forbidden", "message": message},
    }


def _is_generated_class(obj: Mapping[str, Any] | None) -> bool:
    if not obj:
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY:
        return True
    for cfg in (obj.get("spec") or {}).get("config") or []:
        opaque = cfg.get("opaque") or {}
        params = opaque.get("parameters") or {}
        if opaque.get("driver") == DRIVER and params.get("kind") == "TopologyRootConfiguration":
            return True
    return False


def review(request: Mapping[str, Any], ctx: ReviewContext) -> dict[str, Any]:
    """The AdmissionReview ``response`` for one ``request``."""
    raw_uid = request.get("uid")
    uid = raw_uid if isinstance(raw_uid, str) else ""
    problem = request_problem(request)
    if problem is not None:
        return _deny(uid, [problem], "AdmissionReview not understood")
    kind = (request.get("kind") or {}).get("kind")
    operation = request.get("operation")
    obj = request.get("object")
    old = request.get("oldObject")
    user = str((request.get("userInfo") or {}).get("username", ""))
    try:
        if kind == "NetworkTopology" and operation in ("CREATE", "UPDATE"):
            return _topology(uid, obj or {}, ctx)
        if kind == "NetworkPlugin" and operation in ("CREATE", "UPDATE"):
            return _plugin(uid, obj or {}, ctx)
        if kind == "DeviceExposurePolicy" and operation in ("CREATE", "UPDATE"):
            return _policy(uid, obj or {})
        if kind == "IPPool" and operation in ("CREATE", "UPDATE"):
            return _ippool(uid, obj or {}, ctx)
        if kind == "NetworkTopologyRevision":
            return _revision(uid, operation, obj, old, user, ctx)
        if kind == "DeviceClass":
            if (_is_generated_class(obj) or _is_generated_class(old)) and (
                user not in ctx.controller_users
            ):
                return _forbid(
                    uid, f"generated DeviceClasses are written only by the controller, not {user!r}"
                )
            return _allow(uid)
        if kind == "Pod" and operation in ("CREATE", "UPDATE"):
            return _pod(uid, request, ctx)
    except Exception as exc:  # fail closed, with a reason, never a traceback to the client
        log.exception("admission review failed kind=%s operation=%s", kind, operation)
        reason = (
            "the cluster could not be read" if isinstance(exc, ApiFailure) else "internal error"
        )
        return _deny(
            uid,
            [Diagnostic(Code.E_ADMISSION_FAILED, f"admission could not validate {kind}: {reason}")],
            f"{kind} not admitted",
        )
    return _allow(uid)


def _pod_world(
    request: Mapping[str, Any], ctx: ReviewContext
) -> tuple[pods.World | None, list[str]]:
    """The Pod's facts, or None and a warning when they could not be read."""
    if ctx.pod_world is None:
        return pods.World(), []
    namespace = request.get("namespace")
    try:
        return ctx.pod_world(namespace if isinstance(namespace, str) else "", request["object"]), []
    except Exception as exc:
        log.warning("pod admission could not read the cluster error=%s", exc)
        what = "the cluster could not be read" if isinstance(exc, ApiFailure) else "internal error"
        return None, [f"E_ADMISSION_FAILED: dra-multi-network did not check this Pod: {what}"]


def _warned(response: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    if warnings:
        response["warnings"] = [w[:512] for w in warnings[:MAX_CAUSES]]
    return response


def _pod(uid: str, request: Mapping[str, Any], ctx: ReviewContext) -> dict[str, Any]:
    if request["operation"] == "CREATE":
        world, warnings = _pod_world(request, ctx)
    else:  # an update is judged on its annotations alone (pods.validate)
        world, warnings = pods.World(), []
    if world is None:
        return _warned(_allow(uid), warnings)
    decision = pods.validate(
        request.get("object"), request.get("oldObject"), world, operation=str(request["operation"])
    )
    if decision.denials:
        return _deny(uid, decision.denials, "Pod rejected")
    return _warned(_allow(uid), decision.warnings)


def mutate_pod(request: Mapping[str, Any], ctx: ReviewContext) -> dict[str, Any]:
    """The mutating review of a Pod (``POST /mutate-pods``): our plugin merged into its
    required-plugins annotation when it is ours, else allowed unchanged. Never denies
    anything but a request it cannot read as a Pod review."""
    raw_uid = request.get("uid")
    uid = raw_uid if isinstance(raw_uid, str) else ""
    problem = request_problem(request)
    if problem is not None:
        return _deny(uid, [problem], "AdmissionReview not understood")
    kind = (request.get("kind") or {}).get("kind")
    if kind != "Pod" or request.get("operation") != "CREATE":
        return _allow(uid)
    world, warnings = _pod_world(request, ctx)
    if world is None:
        return _warned(_allow(uid), warnings)
    decision = pods.mutate(request.get("object"), world)
    response = _warned(_allow(uid), decision.warnings)
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(decision.patch).encode()).decode()
    return response


def _topology(uid: str, obj: Mapping[str, Any], ctx: ReviewContext) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    plugins = ctx.plugins()
    result = compile_topology(obj, plugins, ctx.registry, uid=str(meta.get("uid", "")))
    if result.compiled is None:  # exactly when the controller would refuse it
        # again with line:column in the served object's YAML rendering (only to deny)
        source = served_document(obj, "NetworkTopology").source
        result = compile_topology(
            obj, plugins, ctx.registry, source=source, uid=str(meta.get("uid", ""))
        )
        return _deny(uid, list(result.diagnostics), "NetworkTopology rejected")
    allowed = _allow(uid)
    if result.diagnostics:  # warnings only: admitted, and the client is told
        allowed["warnings"] = [
            f"{d.code.value} at {d.path or '<object>'}: {d.message}"[:512]
            for d in result.diagnostics[:MAX_CAUSES]
        ]
    return allowed


def _plugin(uid: str, obj: Mapping[str, Any], ctx: ReviewContext) -> dict[str, Any]:
    plugin, diagnostics = checked_plugin_object(obj, ctx.registry)
    if plugin is None or has_errors(diagnostics):
        return _deny(uid, diagnostics, "NetworkPlugin rejected")
    impl = plugin.descriptor.spec.implementation
    if impl.type == "Builtin":
        shipped = load_builtin_plugins().get(impl.handler or "")
        if shipped is None or not same_contract(shipped, plugin):
            return _deny(
                uid,
                [
                    Diagnostic(
                        Code.E_CONFLICT,
                        f"Builtin handler {impl.handler!r}: the descriptor differs from the "
                        "contract this build implements",
                        path="spec.implementation.handler",
                    )
                ],
                "NetworkPlugin rejected",
            )
    return _allow(uid)


def _policy(uid: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    diagnostics = policy_diagnostics(obj)
    if diagnostics:
        return _deny(uid, diagnostics, "DeviceExposurePolicy rejected")
    return _allow(uid)


def _ippool(uid: str, obj: Mapping[str, Any], ctx: ReviewContext) -> dict[str, Any]:
    diagnostics = ippool_diagnostics(obj, ctx.pools() if ctx.pools is not None else ())
    if diagnostics:
        return _deny(uid, diagnostics, "IPPool rejected")
    return _allow(uid)


def _revision(
    uid: str,
    operation: Any,
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    user: str,
    ctx: ReviewContext,
) -> dict[str, Any]:
    if (
        operation == "UPDATE"
        and obj is not None
        and old is not None
        and obj.get("spec") != old.get("spec")
    ):
        return _deny(
            uid,
            [Diagnostic(Code.E_CONFLICT, "revision spec is immutable", path="spec")],
            "NetworkTopologyRevision rejected",
        )
    if user not in ctx.controller_users:
        return _forbid(uid, f"revisions are written only by the controller, not {user!r}")
    if operation == "CREATE" and obj is not None:
        problems = verify_revision_digest(obj.get("spec") or {})
        if problems:
            return _deny(uid, problems, "NetworkTopologyRevision rejected")
    return _allow(uid)


def verify_revision_digest(spec: Mapping[str, Any]) -> list[Diagnostic]:
    """The digest matches the canonical spec content and each locked contract its bytes."""
    problems: list[Diagnostic] = []
    contracts: dict[str, str] = {}
    for i, locked in enumerate(spec.get("plugins") or []):
        digest = sha256_digest(locked.get("descriptor"))
        if digest != locked.get("contractDigest"):
            problems.append(
                Diagnostic(
                    Code.E_CONFLICT,
                    f"plugin {locked.get('name')}: contractDigest does not match the descriptor",
                    path=f"spec.plugins[{i}].contractDigest",
                )
            )
        contracts[str(locked.get("name"))] = str(locked.get("contractDigest"))
    expected = semantic_digest(
        str((spec.get("topologyRef") or {}).get("uid", "")),
        spec.get("normalizedSpec") or {},
        contracts,
        str(spec.get("opcodeContractsDigest", "")),
    )
    if expected != spec.get("digest"):
        problems.append(
            Diagnostic(
                Code.E_CONFLICT,
                f"digest does not match the canonical spec content (expected {expected})",
                path="spec.digest",
            )
        )
    return problems
