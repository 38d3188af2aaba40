"""Pure checks of a claim's allocation before NodePrepare mutates anything (design §7.1).

:func:`driver_results` picks this driver's results of a ResourceClaim allocation and their
class-origin ``TopologyRootConfiguration``; :func:`verify_allocation` checks them against
the referenced NetworkTopologyRevision and this node's published personas and returns the
verified roots in the revision's order. Every refusal is a :class:`Refusal` with a stable
reason code and the field it concerns; nothing here performs I/O.

Initial profile (design §7.1): one revision per claim, every root covered exactly once,
one device per root, class-origin root bindings only (a claim-origin
``TopologyRootConfiguration`` is refused), builtin plugins whose contract digest equals this
agent's own copy, and ``EffectProgram`` plugins (an administrator's own) taken from the
revision that pinned them (:func:`pinned_effect_program`): rebuilt and digest-checked
(:mod:`dmn.interpreter.pinned_plugins`), then re-checked with this agent's own checker and
opcode registry for the step's config — same budget, grants and reason codes as
``dmn lint`` — so a program that does not check on the node is refused with its code before
any mutation, even if the controller was bypassed. ``Operation`` steps (no device of their
own: they consume earlier steps' exports) take the same path (:func:`verify_operations`), so
an administrator's Operation plugin runs from its pin and a builtin one only from this
agent's copy whose digest equals the pinned one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from dmn.agent.coordinator.step_grants import StepGrants, check_step, granting_roots
from dmn.agent.personas.model import Persona, PersonaSet
from dmn.agent.slices import node_allocation_check
from dmn.api.root_config import TopologyRootConfiguration
from dmn.api.workload_parameters import WORKLOAD_PARAMETERS_KIND, WorkloadParameters
from dmn.interpreter.canonical_json import sha256_digest
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.config_schema import validate_config
from dmn.interpreter.diagnostics import Severity, has_errors
from dmn.interpreter.loader import Plugin
from dmn.interpreter.pinned_plugins import plugin_from_pin
from dmn.opcodes.registry import default_registry
from dmn.opcodes.spec import OpcodeRegistry

ROOT_CONFIG_KIND = "TopologyRootConfiguration"


class Refusal(Exception):
    """A claim, Pod or hook refused before (or instead of) any mutation."""

    def __init__(self, code: str, message: str, field: str = "", retryable: bool = False) -> None:
        self.code = code
        self.field = field
        self.message = message
        self.retryable = retryable
        where = f" ({field})" if field else ""
        super().__init__(f"{code}: {message}{where}")


@dataclass(frozen=True)
class DriverResult:
    """One of this driver's allocation results with its root binding."""

    request: str
    pool: str
    device: str
    share_id: str
    consumed: Mapping[str, str]
    root: TopologyRootConfiguration
    index: int  # position in status.allocation.devices.results (for field paths)
    #: the claim's WorkloadParameters for this request (checked against the plugin later)
    workload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifiedRoot:
    step: str
    plugin: Plugin
    config: Mapping[str, Any]
    result: DriverResult
    persona: Persona


@dataclass(frozen=True)
class VerifiedClaim:
    claim_uid: str
    fingerprint: str
    revision: str
    revision_uid: str
    revision_digest: str
    roots: tuple[VerifiedRoot, ...]  # in the revision's topological order
    #: the Operation steps by step id, each with the plugin verified for it
    operations: Mapping[str, VerifiedStep] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifiedStep:
    """An Operation step with the plugin this agent will run for it."""

    step: str
    plugin: Plugin
    config: Mapping[str, Any]
    #: the bridge grants of the policies that exposed the devices this step consumes
    grants: StepGrants = field(default_factory=StepGrants)


def _applies(config: Mapping[str, Any], request: str) -> bool:
    requests = config.get("requests") or []
    return not requests or request in requests or request.split("/")[0] in requests


def _check_request(claim: Mapping[str, Any], request: str, where: str) -> None:
    """The initial profile: one device per root (ExactCount 1, for a request or for the
    ``firstAvailable`` subrequest the scheduler chose, named ``<request>/<subrequest>``) and no
    All mode (design §7.1)."""
    name, _, sub = request.partition("/")
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    spec = next((q for q in requests if q.get("name") == name), None)
    if spec is None:
        return  # a template's request names are validated by the API server
    if sub:
        alternatives = spec.get("firstAvailable") or []
        chosen = next((q for q in alternatives if q.get("name") == sub), None)
        if chosen is None:
            raise Refusal(
                "E_ALLOCATION_MODE", f"request {name!r} has no firstAvailable entry {sub!r}", where
            )
    elif spec.get("firstAvailable"):
        raise Refusal(
            "E_ALLOCATION_MODE", f"request {request!r} was allocated without a subrequest", where
        )
    else:
        chosen = spec.get("exactly") or {}
    mode = chosen.get("allocationMode", "ExactCount")
    if mode != "ExactCount" or int(chosen.get("count", 1)) != 1:
        raise Refusal(
            "E_ALLOCATION_MODE",
            f"request {request!r} must be ExactCount 1, is {mode} {chosen.get('count', 1)}",
            where,
        )


def driver_results(claim: Mapping[str, Any], driver: str) -> list[DriverResult]:
    """This driver's results of the claim's allocation with their root configuration.

    Another driver's results and configuration are left alone. Raises :class:`Refusal`
    when one of our results has no class-origin root binding, has a claim-origin one, or
    the opaque parameters do not parse.
    """
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise Refusal("E_NOT_ALLOCATED", "the claim has no allocation", "status.allocation")
    devices = allocation.get("devices") or {}
    configs = [
        c for c in devices.get("config") or [] if (c.get("opaque") or {}).get("driver") == driver
    ]
    out: list[DriverResult] = []
    for i, res in enumerate(devices.get("results") or []):
        if res.get("driver") != driver:
            continue
        where = f"status.allocation.devices.results[{i}]"
        if res.get("adminAccess"):
            raise Refusal("E_ADMIN_ACCESS", "adminAccess is not supported", where)
        request = str(res.get("request", ""))
        _check_request(claim, request, where)
        bindings = []
        workload: list[WorkloadParameters] = []
        for c in configs:
            if not _applies(c, request):
                continue
            params = (c.get("opaque") or {}).get("parameters") or {}
            kind = params.get("kind") if isinstance(params, Mapping) else None
            if kind != ROOT_CONFIG_KIND and (
                kind == WORKLOAD_PARAMETERS_KIND or c.get("source") == "FromClaim"
            ):
                workload.append(_workload_parameters(c, params))
                continue
            if params.get("kind") != ROOT_CONFIG_KIND:
                continue
            if c.get("source") != "FromClass":
                raise Refusal(
                    "E_CLAIM_ORIGIN_CONFIG",
                    "a root binding is accepted only from the DeviceClass",
                    "status.allocation.devices.config",
                )
            try:
                bindings.append(TopologyRootConfiguration.model_validate(params))
            except ValidationError as exc:
                raise Refusal(
                    "E_ROOT_CONFIG", f"invalid {ROOT_CONFIG_KIND}: {exc.errors()[0]['msg']}", where
                ) from exc
        if len(bindings) != 1:
            raise Refusal(
                "E_ROOT_CONFIG",
                f"request {request!r} has {len(bindings)} class-origin root bindings, need 1",
                where,
            )
        out.append(
            DriverResult(
                request=request,
                pool=str(res.get("pool", "")),
                device=str(res.get("device", "")),
                share_id=str(res.get("shareID") or ""),
                consumed={str(k): str(v) for k, v in (res.get("consumedCapacity") or {}).items()},
                root=bindings[0],
                index=i,
                workload=_one_set_each(workload, request),
            )
        )
    return out


_CLAIM_CONFIG = "spec.devices.config"


def _workload_parameters(config: Mapping[str, Any], params: Any) -> WorkloadParameters:
    """A claim's configuration for this driver: WorkloadParameters, or refused."""
    if config.get("source") != "FromClaim":
        raise Refusal(
            "E_CLAIM_CONFIG", f"{WORKLOAD_PARAMETERS_KIND} come from the claim only", _CLAIM_CONFIG
        )
    kind = params.get("kind") if isinstance(params, Mapping) else None
    if kind != WORKLOAD_PARAMETERS_KIND:
        raise Refusal(
            "E_CLAIM_CONFIG",
            f"a claim configures this driver only with {WORKLOAD_PARAMETERS_KIND}, not "
            f"{str(kind)[:64]!r}",
            _CLAIM_CONFIG,
        )
    try:
        return WorkloadParameters.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise Refusal(
            "E_CLAIM_CONFIG",
            f"invalid {WORKLOAD_PARAMETERS_KIND}: {where}: {first['msg']}",
            _CLAIM_CONFIG,
        ) from exc


def _one_set_each(parameters: Sequence[WorkloadParameters], request: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for p in parameters:
        for key, value in p.config.items():
            if key in merged:
                raise Refusal(
                    "E_CLAIM_CONFIG",
                    f"request {request!r}: {key!r} is set by two {WORKLOAD_PARAMETERS_KIND}",
                    _CLAIM_CONFIG,
                )
            merged[key] = value
    return merged


def check_workload_config(plugin: Plugin, config: Mapping[str, Any]) -> None:
    """Refuse (``E_WORKLOAD_PARAMETER``) a merged configuration the plugin's configSchema
    rejects, at NodePrepare, before anything runs."""
    _, diagnostics = validate_config(plugin.descriptor.spec.config_schema, config)
    errors = [d for d in diagnostics if d.severity is Severity.ERROR]
    if errors:
        raise Refusal("E_WORKLOAD_PARAMETER", errors[0].message, _CLAIM_CONFIG)


def with_workload(
    config: Mapping[str, Any], plugin: Plugin, workload: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """The root step's configuration with the workload's values over the topology's: each
    must be a field the plugin declares ``workloadSettable`` (``E_WORKLOAD_PARAMETER``
    otherwise); the plugin's configSchema then checks the values at binding."""
    settable = set(plugin.descriptor.spec.workload_settable or ())
    for key in workload:
        if key not in settable:
            raise Refusal(
                "E_WORKLOAD_PARAMETER",
                f"{key!r} is not a workload-settable field of plugin {plugin.name} "
                f"(settable: {sorted(settable) or 'none'})",
                f"{_CLAIM_CONFIG}.opaque.parameters.config.{key}"[:256],
            )
    return {**config, **workload}


def fingerprint(claim_uid: str, results: Sequence[DriverResult]) -> str:
    """Canonical allocation fingerprint (design §7.1); shareID is never omitted."""
    return sha256_digest(
        {
            "claimUID": claim_uid,
            "results": [
                {
                    "request": r.request,
                    "pool": r.pool,
                    "device": r.device,
                    "shareID": r.share_id,
                    "consumedCapacity": dict(sorted(r.consumed.items())),
                    "root": r.root.model_dump(mode="json", by_alias=True),
                }
                for r in sorted(results, key=lambda r: (r.request, r.device, r.share_id))
            ],
        }
    )


def revision_usable(revision: Mapping[str, Any], accept_superseded: bool = False) -> bool:
    """Whether :func:`verify_allocation` accepts ``revision``'s phase: Ready, or also
    Superseded for an already prepared claim (``accept_superseded``)."""
    superseded = (revision.get("status") or {}).get("phase") == "Superseded"
    return _ready(revision) or (accept_superseded and superseded)


def _ready(revision: Mapping[str, Any]) -> bool:
    status = revision.get("status") or {}
    if status.get("phase") != "Ready":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def pinned_effect_program(
    pin: Mapping[str, Any], config: Mapping[str, Any], registry: OpcodeRegistry
) -> Plugin | None:
    """The ``EffectProgram`` plugin a revision pins, re-checked here for ``config``.

    None when the pin is a ``Builtin`` (only this agent's own copies run builtins); a
    :class:`Refusal` carrying the first diagnostic's reason code when the pin does not
    rebuild to its digest or does not check with this agent's checker and registry.
    """
    name = str(pin.get("name", ""))
    where = f"revision.spec.plugins[{name}]"
    plugin, problems = plugin_from_pin(pin)
    if plugin is None:
        first = problems[0]
        raise Refusal(first.code.value, f"pinned plugin {name}: {first.message}", where)
    if plugin.descriptor.spec.implementation.type != "EffectProgram":
        return None
    problems = check_plugin(plugin, registry, config)
    if has_errors(problems):
        first = next(d for d in problems if d.severity.value == "error")
        field = f" at {first.path}" if first.path else ""
        raise Refusal(
            first.code.value,
            f"plugin {name} does not check on this node{field}: {first.message}",
            where,
        )
    return plugin


def _plugin_for(
    name: str,
    digest: str,
    pin: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    plugins: Mapping[str, Plugin],
    registry: OpcodeRegistry,
    where: str,
) -> Plugin:
    """This agent's builtin when its contract digest is the pinned one, else the
    ``EffectProgram`` the revision pins, re-checked here for ``config``; refused otherwise."""
    plugin = plugins.get(name)
    if plugin is not None and plugin.contract_digest == digest:
        return plugin
    checked = pinned_effect_program(pin, config, registry) if pin is not None else None
    if checked is None:
        raise Refusal(
            "E_PLUGIN_UNSUPPORTED",
            f"plugin {name} with contract {digest} is not implemented by this agent",
            where,
        )
    return checked


def verify_operations(
    revision: Mapping[str, Any], plugins: Mapping[str, Plugin], registry: OpcodeRegistry
) -> dict[str, VerifiedStep]:
    """The Operation steps of ``revision`` (pure): each step's plugin must be pinned by the
    revision (``E_CONTRACT_MISMATCH`` otherwise) and is taken as :func:`_plugin_for` says —
    refused before any mutation when it does not check on this node."""
    spec = revision.get("spec") or {}
    roots = {str(r["rootStep"]) for r in spec.get("roots") or []}
    steps = {str(s["id"]): s for s in (spec.get("normalizedSpec") or {}).get("steps") or []}
    pins = {str(p["name"]): p for p in spec.get("plugins") or [] if isinstance(p, Mapping)}
    out: dict[str, VerifiedStep] = {}
    for step_id in [s for s in spec.get("order") or [] if s not in roots]:
        step = steps.get(step_id) or {}
        name = str((step.get("pluginRef") or {}).get("name", ""))
        where = f"revision.spec.normalizedSpec.steps[{step_id}]"
        pin = pins.get(name)
        if pin is None:
            raise Refusal(
                "E_CONTRACT_MISMATCH", f"step {step_id}: plugin {name} is not pinned", where
            )
        config = dict(step.get("config") or {})
        digest = str(pin.get("contractDigest"))
        plugin = _plugin_for(name, digest, pin, config, plugins, registry, where)
        out[step_id] = VerifiedStep(step_id, plugin, config)
    return out


def verify_allocation(
    claim_uid: str,
    results: Sequence[DriverResult],
    revision: Mapping[str, Any],
    *,
    pool: str,
    personas: PersonaSet,
    plugins: Mapping[str, Plugin],
    cleanup_pending: Sequence[str] = (),
    accept_superseded: bool = False,
    registry: OpcodeRegistry | None = None,
) -> VerifiedClaim:
    """Check every driver-owned result against ``revision`` and this node (pure).

    A new preparation needs a Ready revision; attaching an already prepared claim
    (``accept_superseded``) also accepts a revision a newer one superseded — existing
    allocations keep the contract they were prepared under."""
    registry = registry or default_registry()
    names = {r.root.revision_ref.name for r in results}
    if len(names) != 1:
        raise Refusal("E_MIXED_REVISIONS", f"results reference revisions {sorted(names)}")
    ref = results[0].root.revision_ref
    meta, spec = revision.get("metadata") or {}, revision.get("spec") or {}
    if meta.get("name") != ref.name or meta.get("uid") != ref.uid:
        raise Refusal(
            "E_REVISION_UID",
            f"revision {ref.name} has uid {meta.get('uid')}, the allocation pins {ref.uid}",
            "revisionRef.uid",
        )
    if spec.get("digest") != ref.digest:
        raise Refusal(
            "E_REVISION_DIGEST",
            f"revision {ref.name} has digest {spec.get('digest')}, the allocation pins "
            f"{ref.digest}",
            "revisionRef.digest",
        )
    if not revision_usable(revision, accept_superseded):
        raise Refusal("E_REVISION_NOT_READY", f"revision {ref.name} is not Ready", "status")
    roots = {str(r["rootStep"]): r for r in spec.get("roots") or []}
    by_step: dict[str, DriverResult] = {}
    for r in results:
        where = f"status.allocation.devices.results[{r.index}]"
        if r.root.root_step in by_step:
            raise Refusal(
                "E_ROOT_COVERAGE", f"root {r.root.root_step!r} is covered more than once", where
            )
        if r.root.root_step not in roots:
            raise Refusal("E_ROOT_COVERAGE", f"revision has no root {r.root.root_step!r}", where)
        if r.pool != pool:
            raise Refusal(
                "E_NOT_THIS_NODE", f"device {r.pool}/{r.device} is not in this node's pool", where
            )
        by_step[r.root.root_step] = r
    missing = sorted(set(roots) - set(by_step))
    if missing:
        raise Refusal("E_ROOT_COVERAGE", f"roots {missing} are not allocated", "status.allocation")
    findings = node_allocation_check(personas, [r.device for r in results], cleanup_pending)
    if findings:
        f = findings[0]
        raise Refusal(str(f.code), f"{f.device}: {f.message}", "status.allocation")
    current = personas.by_name()
    steps = {str(s["id"]): s for s in (spec.get("normalizedSpec") or {}).get("steps") or []}
    pins = {str(p["name"]): p for p in spec.get("plugins") or [] if isinstance(p, Mapping)}
    locked = {name: str(p.get("contractDigest")) for name, p in pins.items()}
    verified: list[VerifiedRoot] = []
    for step_id in [s for s in spec.get("order") or [] if s in roots]:
        root, r = roots[step_id], by_step[step_id]
        persona = current[r.device]
        name = str(root["plugin"])
        where = f"status.allocation.devices.results[{r.index}]"
        if (persona.plugin, persona.mode) != (name, root.get("mode")):
            raise Refusal(
                "E_PERSONA_MISMATCH",
                f"device {r.device} is {persona.plugin}/{persona.mode}, root {step_id} needs "
                f"{name}/{root.get('mode')}",
                where,
            )
        if bool(root.get("shared")) != bool(r.share_id):
            raise Refusal("E_SHARE", f"root {step_id}: shareID does not match sharing", where)
        digest = r.root.plugin_contract_digest
        if digest != root.get("pluginContractDigest") or digest != locked.get(name):
            raise Refusal("E_CONTRACT_MISMATCH", f"root {step_id}: contract digest differs", where)
        config = dict(steps[step_id].get("config") or {})
        plugin = _plugin_for(name, digest, pins.get(name), config, plugins, registry, where)
        if r.workload:
            config = with_workload(config, plugin, r.workload, where)
            check_workload_config(plugin, config)
        verified.append(VerifiedRoot(step_id, plugin, config, r, persona))
    operations = _with_grants(verify_operations(revision, plugins, registry), steps, verified)
    return VerifiedClaim(
        claim_uid=claim_uid,
        fingerprint=fingerprint(claim_uid, results),
        revision=ref.name,
        revision_uid=ref.uid,
        revision_digest=ref.digest,
        roots=tuple(verified),
        operations=operations,
    )


def _with_grants(
    operations: Mapping[str, VerifiedStep],
    steps: Mapping[str, Mapping[str, Any]],
    roots: Sequence[VerifiedRoot],
) -> dict[str, VerifiedStep]:
    """Each Operation step with the bridge grants of the personas its inputs come from
    (never from the workload's config), refused before any mutation when its program would
    name an alias or VLAN those grants do not hold."""
    personas = {root.step: root.persona for root in roots}
    out: dict[str, VerifiedStep] = {}
    for step_id, step in operations.items():
        feeding = granting_roots(step_id, steps, personas)
        grants = StepGrants.of(personas[r] for r in feeding)
        where = f"revision.spec.normalizedSpec.steps[{step_id}]"
        problem = check_step(step.plugin, step.config, grants, where)
        if problem is not None:
            raise Refusal(problem.code, f"step {step_id}: {problem.message}", problem.field)
        out[step_id] = replace(step, grants=grants)
    return out
