"""The topology compiler (design §4.4–§4.5): NetworkTopology → revision + DeviceClasses.

Pure: no I/O, no clock, no Kubernetes client. The same function serves the controller,
the admission webhook and ``dmn compile``. It reports every problem it can find, each
as a :class:`Diagnostic` with a stable reason code, the field path and — when a
:class:`SourceMap` is given — the file position.

Contract::

    result = compile_topology(topology, plugins, registry, source=..., uid=...)
    result.diagnostics      # all problems (empty when compiled)
    result.compiled         # CompiledTopology | None (None iff errors)
    result.compiled.revision                  # NetworkTopologyRevision object (no uid)
    result.compiled.device_classes(rev_uid)   # one DeviceClass per root
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cel
from pydantic import ValidationError

from dmn.api.identity import (
    ANNOTATION_DIGEST,
    API_VERSION,
    LABEL_MANAGED_BY,
    LABEL_TOPOLOGY,
    LABEL_TOPOLOGY_UID,
    MANAGED_BY,
)
from dmn.api.model import RevisionRef
from dmn.api.selector_language import check_selector
from dmn.api.topology import MAX_ROOTS, MAX_STEPS, NetworkTopology
from dmn.controller.compile.classes import RootSelector, device_class, revision_name
from dmn.controller.compile.digest import (
    COMPILER_VERSION,
    encoded_size,
    naming_digest,
    normalize_spec,
    semantic_digest,
)
from dmn.controller.compile.programs import step_programs, step_verdicts
from dmn.engine.config_plan import ConfigPlan, config_parameter_problems, plan_for_config
from dmn.interpreter.checker import CleanVerdicts
from dmn.interpreter.diagnostics import Code, Diagnostic, Severity
from dmn.interpreter.documents import InputPort, OutputPort
from dmn.interpreter.loader import Plugin
from dmn.interpreter.opcode_contracts import opcode_contract_digests, opcode_contracts_digest
from dmn.interpreter.source import SourceMap
from dmn.opcodes.registry import default_registry
from dmn.opcodes.spec import OpcodeRegistry

MAX_BYTES = 256 * 1024
#: A root whose allocation grants only these accesses is a share of a parent (macvlan,
#: ipvlan): its class requires the consumable ``children`` capacity (design §5.4).
SHARED_ACCESSES = frozenset({"CreateChild", "Read"})
EXCLUSIVE_ACCESSES = frozenset({"ExclusiveConfigure", "ExclusiveMaster", "AttachMember"})
_REF = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([A-Za-z][A-Za-z0-9_]*)$")
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class Port:
    type: str
    link_type: str | None
    min_items: int
    max_items: int
    accesses: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CompiledTopology:
    name: str
    uid: str
    digest: str
    #: what the revision and class names are made from (no UID): see ``naming_digest``
    naming_digest: str
    revision_name: str
    revision: dict[str, Any]
    roots: tuple[RootSelector, ...]
    root_contracts: Mapping[str, str]

    def revision_ref(self, revision_uid: str) -> RevisionRef:
        return RevisionRef(name=self.revision_name, uid=revision_uid, digest=self.digest)

    def device_classes(self, revision_uid: str) -> list[dict[str, Any]]:
        """The DeviceClasses bound to the created revision's UID."""
        ref = self.revision_ref(revision_uid)
        return [
            device_class(
                topology=self.name,
                revision=ref,
                sel=sel,
                plugin_contract_digest=self.root_contracts[sel.root_step],
                naming_digest=self.naming_digest,
            )
            for sel in self.roots
        ]


@dataclass(frozen=True)
class CompileResult:
    compiled: CompiledTopology | None
    diagnostics: tuple[Diagnostic, ...]

    @property
    def ok(self) -> bool:
        return self.compiled is not None


@functools.lru_cache(maxsize=1024)
def _compiled(expression: str) -> tuple[Any, str | None]:
    """The compiled CEL program (cached: selectors repeat across reconciles), or why not."""
    try:
        return cel.compile(expression), None
    except (ValueError, RuntimeError, TypeError) as exc:
        return None, str(exc).splitlines()[0][:300]


def cel_problem(expression: str) -> str | None:
    """Why ``expression`` does not compile as CEL (the real implementation), or None."""
    return _compiled(expression)[1]


def hardware_selector_problems(expression: str) -> list[tuple[Code, str]]:
    """Why an administrator's selector would be refused: syntax, types and worst-case cost
    as Kubernetes checks them, then the ``cel`` binding's own parse. Never evaluates it."""
    verdict = check_selector(expression)
    if verdict.problems:
        return [
            (
                Code(p.code),
                f"hardware selector is not valid CEL: {p.message}"
                f" (column {p.column} of the expression)",
            )
            for p in verdict.problems
        ]
    problem = cel_problem(expression)
    if problem is not None:
        return [(Code.E_SYNTAX, f"hardware selector is not valid CEL: {problem}")]
    return []


def _split_path(text: str) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    for m in _PATH_PART.finditer(text):
        parts.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
    return tuple(parts)


class _Report:
    def __init__(self, source: SourceMap | None) -> None:
        self.source = source
        self.items: list[Diagnostic] = []

    def add(self, code: Code, message: str, path: str, *, key: bool = False) -> None:
        span = None
        if self.source is not None:
            parts = _split_path(path)
            span = self.source.key_span(parts) if key else self.source.span(parts)
        self.items.append(Diagnostic.at(code, message, span, path))

    def rebase(self, diag: Diagnostic, path: str) -> None:
        self.add(diag.code, diag.message, path, key=diag.code is Code.E_UNKNOWN_FIELD)

    @property
    def failed(self) -> bool:
        return any(d.severity is Severity.ERROR for d in self.items)


#: A topology's name, as a plugin's (a DNS label starting with a letter): the revision
#: (``<name>-<digest>``) and the DeviceClasses (``<name>-<root>[-<digest>]``) are named from it.
TOPOLOGY_NAME = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)


def _shape(topology: Mapping[str, Any], report: _Report) -> NetworkTopology | None:
    try:
        return NetworkTopology.model_validate(dict(topology))
    except ValidationError as exc:
        for err in exc.errors():
            path = "".join(
                f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p))
                for i, p in enumerate(err["loc"])
            )
            code = Code.E_UNKNOWN_FIELD if err["type"] == "extra_forbidden" else Code.E_SCHEMA
            if err["type"] == "too_long" and tuple(err["loc"]) == ("spec", "steps"):
                code = Code.E_BUDGET
            report.add(code, f"{err['msg']}", path, key=code is Code.E_UNKNOWN_FIELD)
        return None


def _spec_of(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = doc.get("spec", doc)
    return spec if isinstance(spec, Mapping) else {}


def _ports(decl: Mapping[str, InputPort] | Mapping[str, OutputPort]) -> dict[str, Port]:
    """The compiler's view of the ports a step's config plan turned on."""
    out: dict[str, Port] = {}
    for name, p in decl.items():
        out[name] = Port(
            type=p.type,
            link_type=p.link_type,
            min_items=p.min_items,
            max_items=p.max_items,
            accesses=p.accesses() if isinstance(p, InputPort) else frozenset(),
        )
    return out


@dataclass
class _Step:
    index: int
    id: str
    kind: str
    plugin: str
    descriptor: Plugin
    plan: ConfigPlan
    config: dict[str, Any]
    inputs: dict[str, list[tuple[str, str, str]]]  # port -> [(step, port, path)]
    outputs: dict[str, Port]
    in_ports: dict[str, Port]
    bad_ports: set[str]
    alloc_ports: dict[str, Port]


def compile_topology(
    topology: Mapping[str, Any],
    plugins: Mapping[str, Plugin],
    registry: OpcodeRegistry | None = None,
    *,
    source: SourceMap | None = None,
    uid: str | None = None,
    verdicts: CleanVerdicts | None = None,
) -> CompileResult:
    """Compile one NetworkTopology object against ``plugins`` (name → loaded plugin).

    ``registry`` defaults to the project's opcode registry.
    ``uid`` overrides ``metadata.uid`` (the controller passes the live object's UID; the
    offline preview has none and digests over an empty UID).
    ``verdicts``: the clean checker verdicts to reuse and add to (the controller keeps one
    across compiles); a fresh one for this compile without it.
    """
    if registry is None:
        registry = default_registry()
    report = _Report(source)
    model = _shape(topology, report)
    if model is None:
        return CompileResult(None, tuple(report.items))
    meta = topology.get("metadata") or {}
    raw_name = meta.get("name") if isinstance(meta, Mapping) else None
    name = raw_name if isinstance(raw_name, str) else ""
    if raw_name is None:
        report.add(Code.E_SCHEMA, "metadata.name is required", "metadata")
    elif not TOPOLOGY_NAME.fullmatch(name):
        report.add(
            Code.E_NAME_INVALID,
            f"metadata.name {str(raw_name)[:80]!r} is not a DNS label (1-63 lower-case "
            "letters, digits and '-', starting with a letter): it names the revision and the "
            "DeviceClasses",
            "metadata.name",
        )
        name = ""
    topo_uid = uid if uid is not None else str(meta.get("uid", ""))
    raw_steps = list(topology["spec"]["steps"])
    budget = set(model.spec.effect_budget.allow)

    if len(raw_steps) > MAX_STEPS:
        report.add(
            Code.E_BUDGET, f"{len(raw_steps)} steps exceed the limit of {MAX_STEPS}", "spec.steps"
        )

    steps: dict[str, _Step] = {}
    for i, raw in enumerate(raw_steps):
        where = f"spec.steps[{i}]"
        sid = raw["id"]
        if sid in steps:
            report.add(Code.E_DUPLICATE_ID, f"step id {sid!r} is used twice", f"{where}.id")
            continue
        plugin = raw["pluginRef"]["name"]
        doc = plugins.get(plugin)
        if doc is None:
            report.add(
                Code.E_REF_UNRESOLVED,
                f"NetworkPlugin {plugin!r} not found",
                f"{where}.pluginRef.name",
            )
            continue
        descriptor = doc.descriptor.spec
        kinds = list(descriptor.step_kinds)
        if raw["kind"] not in kinds:
            report.add(
                Code.E_SCHEMA,
                f"plugin {plugin} cannot be used as an {raw['kind']} step"
                f" (stepKinds: {', '.join(kinds)})",
                f"{where}.kind",
            )
        for j, selector in enumerate(raw.get("hardwareSelectors") or []):
            for code, message in hardware_selector_problems(selector["cel"]["expression"]):
                report.add(code, message, f"{where}.hardwareSelectors[{j}].cel.expression")
        plan = plan_for_config(doc, dict(raw.get("config") or {}), path=f"{where}.config")
        if not isinstance(plan, ConfigPlan):
            for diag in plan:
                report.rebase(diag, diag.path)
            continue
        for hook in ("prepare", "connect"):
            for planned in plan.hook(hook):
                spec = registry.get(planned.kind)
                if spec is None:
                    continue
                for code, message in config_parameter_problems(planned, spec.name, spec.parameters):
                    report.add(
                        code,
                        f"effect {planned.id!r} of {plugin}'s {hook} would be refused on "
                        f"the node for this config: {message}",
                        f"{where}.config",
                    )
        inputs: dict[str, list[tuple[str, str, str]]] = {}
        bad_ports: set[str] = set()
        for port, binding in (raw.get("inputs") or {}).items():
            refs = binding if isinstance(binding, list) else [binding]
            ppath = f"{where}.inputs.{port}"
            parsed: list[tuple[str, str, str]] = []
            for j, ref in enumerate(refs):
                rpath = f"{ppath}[{j}]" if isinstance(binding, list) else ppath
                if (
                    not isinstance(ref, Mapping)
                    or set(ref) != {"from"}
                    or not isinstance(ref["from"], str)
                ):
                    report.add(Code.E_SCHEMA, "an input binding is {from: <step>.<port>}", rpath)
                    bad_ports.add(port)
                    continue
                m = _REF.fullmatch(ref["from"])
                if m is None:
                    report.add(
                        Code.E_SYNTAX,
                        f"reference {ref['from']!r} is not <step>.<port>",
                        f"{rpath}.from",
                    )
                    bad_ports.add(port)
                    continue
                parsed.append((m.group(1), m.group(3), f"{rpath}.from"))
            inputs[port] = parsed
        steps[sid] = _Step(
            index=i,
            id=sid,
            kind=raw["kind"],
            plugin=plugin,
            descriptor=doc,
            plan=plan,
            config=dict(plan.config),
            inputs=inputs,
            outputs=_ports(plan.outputs),
            in_ports=_ports(plan.inputs),
            bad_ports=bad_ports,
            alloc_ports=_ports(plan.allocation),
        )

    roots = [s for s in steps.values() if s.kind == "Allocation"]
    if not roots and not report.failed:
        report.add(
            Code.E_ROOT_COVERAGE, "a topology needs at least one Allocation root", "spec.steps"
        )
    if len(roots) > MAX_ROOTS:
        report.add(
            Code.E_BUDGET,
            f"{len(roots)} allocation roots exceed the limit of {MAX_ROOTS}",
            "spec.steps",
        )

    _check_graph(steps, report)
    _check_ifnames(steps, report)

    used_opcodes: set[str] = set()
    if verdicts is None:
        verdicts = step_verdicts()
    for s in steps.values():
        found = step_programs(s.descriptor, s.plan, registry, verdicts)
        where = f"spec.steps[{s.index}]"
        for diag in found.diagnostics:
            report.add(
                diag.code,
                f"plugin {s.plugin} with this step's config: {diag.render()}",
                f"{where}.pluginRef.name",
            )
        # an opcode the registry does not know is reported as E_UNKNOWN_OPCODE above;
        # "the budget does not grant it" would only send the author the wrong way
        for opcode in sorted(op for op in found.opcodes - budget if registry.get(op)):
            report.add(
                Code.E_EFFECT_DENIED,
                f"step {s.id} ({s.plugin}) runs {opcode},"
                " which spec.effectBudget.allow does not grant",
                f"{where}",
            )
        used_opcodes |= found.opcodes

    if report.failed:
        return CompileResult(None, tuple(report.items))

    contracts: dict[str, str] = {}  # one digest per plugin, not per step (issue 15)
    for s in steps.values():
        if s.plugin not in contracts:
            contracts[s.plugin] = s.descriptor.contract_digest
    normalized = normalize_spec(topology["spec"], {s.id: s.config for s in steps.values()})
    locked = [
        {"name": p, "contractDigest": contracts[p], "descriptor": plugins[p].to_json()}
        for p in sorted(contracts)
    ]
    size = encoded_size([normalized, locked])
    if size > MAX_BYTES:
        report.add(
            Code.E_BUDGET,
            f"normalized topology plus locked contracts is {size} bytes (limit {MAX_BYTES})",
            "spec",
        )
        return CompileResult(None, tuple(report.items))

    op_digest = opcode_contracts_digest(registry, used_opcodes)
    digest = semantic_digest(topo_uid, normalized, contracts, op_digest)
    names = naming_digest(name, normalized, contracts, op_digest)
    rev_name = revision_name(name, names)
    selectors: list[RootSelector] = []
    root_entries: list[dict[str, Any]] = []
    from dmn.controller.compile.classes import class_name

    for s in sorted(roots, key=lambda r: r.id):
        raw = raw_steps[s.index]
        mode = s.config.get("mode")
        link = s.config.get("linkType")
        if link is None:
            link = next((p.link_type for p in s.outputs.values() if p.link_type), None)
        if not isinstance(mode, str):
            report.add(
                Code.E_SCHEMA,
                f"allocation root {s.id}: plugin {s.plugin} has no `mode` in this step's "
                "config; an Allocation plugin's configSchema must have a string property "
                "`mode` (the persona mode a DeviceExposurePolicy exposes devices under), e.g. "
                "`mode: {type: string, enum: [vepa], default: vepa}`, or the step must set "
                "config.mode",
                f"spec.steps[{s.index}].config",
            )
            continue
        hardware = tuple(h["cel"]["expression"] for h in raw.get("hardwareSelectors") or [])
        shared = bool(s.alloc_ports) and all(
            p.accesses <= SHARED_ACCESSES for p in s.alloc_ports.values()
        )
        sel = RootSelector(
            s.id, s.plugin, mode, link if isinstance(link, str) else None, hardware, shared
        )
        selectors.append(sel)
        entry = {
            "rootStep": s.id,
            "plugin": s.plugin,
            "mode": mode,
            "deviceClassName": class_name(name, s.id, names),
            "pluginContractDigest": contracts[s.plugin],
            "shared": shared,
        }
        if sel.link_type is not None:
            entry["linkType"] = sel.link_type
        root_entries.append(entry)
    if report.failed:
        return CompileResult(None, tuple(report.items))

    outputs = [
        {
            "step": s.id,
            "port": port,
            "type": p.type,
            **({"linkType": p.link_type} if p.link_type else {}),
            "minItems": p.min_items,
            "maxItems": p.max_items,
        }
        for s in sorted(steps.values(), key=lambda s: s.id)
        for port, p in sorted(s.outputs.items())
    ]
    revision = {
        "apiVersion": API_VERSION,
        "kind": "NetworkTopologyRevision",
        "metadata": {
            "name": rev_name,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_TOPOLOGY: name[:63].rstrip("-."),
                **({LABEL_TOPOLOGY_UID: topo_uid} if topo_uid else {}),
            },
            "annotations": {ANNOTATION_DIGEST: digest},
        },
        "spec": {
            "topologyRef": {
                "name": name,
                "uid": topo_uid or "<unassigned>",
                "generation": int(meta.get("generation", 0) or 0),
            },
            "digest": digest,
            "compilerVersion": COMPILER_VERSION,
            "opcodeContractsDigest": op_digest,
            "opcodeContracts": opcode_contract_digests(registry, used_opcodes),
            "normalizedSpec": normalized,
            "plugins": locked,
            "roots": root_entries,
            "outputs": outputs,
            "order": _topological_order(steps),
        },
    }
    compiled = CompiledTopology(
        name=name,
        uid=topo_uid,
        digest=digest,
        naming_digest=names,
        revision_name=rev_name,
        revision=revision,
        roots=tuple(selectors),
        root_contracts={s.id: contracts[s.plugin] for s in roots},
    )
    return CompileResult(compiled, tuple(report.items))


def _check_graph(steps: Mapping[str, _Step], report: _Report) -> None:
    consumers: dict[tuple[str, str], list[tuple[str, frozenset[str], str]]] = {}
    for s in steps.values():
        where = f"spec.steps[{s.index}]"
        if s.kind == "Allocation":
            continue
        if not s.inputs:
            report.add(
                Code.E_ROOT_COVERAGE,
                f"operation {s.id} consumes nothing, so no root covers it",
                where,
            )
        for port in s.inputs:
            if port not in s.in_ports:
                report.add(
                    Code.E_UNKNOWN_FIELD,
                    f"plugin {s.plugin} has no input port {port!r}",
                    f"{where}.inputs.{port}",
                    key=True,
                )
        for port, decl in sorted(s.in_ports.items()):
            refs = s.inputs.get(port, [])
            lo = hi = 0
            broken = False
            for src_step, src_port, rpath in refs:
                src = steps.get(src_step)
                if src is None:
                    report.add(Code.E_REF_UNRESOLVED, f"no step {src_step!r}", rpath)
                    broken = True
                    continue
                out = src.outputs.get(src_port)
                if out is None:
                    available = ", ".join(sorted(src.outputs)) or "none"
                    broken = True
                    report.add(
                        Code.E_REF_UNRESOLVED,
                        f"step {src_step} has no output {src_port!r} under its config"
                        f" (outputs: {available})",
                        rpath,
                    )
                    continue
                if out.type != decl.type or (
                    decl.link_type is not None and out.link_type != decl.link_type
                ):
                    report.add(
                        Code.E_PORT_TYPE,
                        f"{src_step}.{src_port} is {_port_text(out)},"
                        f" input {port} needs {_port_text(decl)}",
                        rpath,
                    )
                    broken = True
                    continue
                if out.type == "SharedParent/v1" and decl.accesses & EXCLUSIVE_ACCESSES:
                    report.add(
                        Code.E_SHARED_PARENT_MUTATION,
                        f"input {port} needs {'/'.join(sorted(decl.accesses))} on a shared parent,"
                        " which grants CreateChild only",
                        rpath,
                    )
                lo += out.min_items
                hi += out.max_items
                consumers.setdefault((src_step, src_port), []).append((s.id, decl.accesses, rpath))
            if broken or port in s.bad_ports or not s.inputs:
                continue
            if lo < decl.min_items or hi > decl.max_items:
                report.add(
                    Code.E_CARDINALITY,
                    f"input {port} of {s.id} takes {decl.min_items}..{decl.max_items} handles,"
                    f" bound {lo}..{hi}",
                    f"{where}.inputs.{port}" if refs else f"{where}.inputs",
                )
    for (src_step, src_port), users in sorted(consumers.items()):
        if len(users) > 1 and any(a & EXCLUSIVE_ACCESSES for _, a, _ in users):
            for _, _, rpath in users[1:]:
                report.add(
                    Code.E_ACCESS,
                    f"{src_step}.{src_port} is consumed exclusively by more than one step",
                    rpath,
                )
    _check_cycles(steps, report)


def _port_text(port: Port) -> str:
    return f"{port.type}/{port.link_type}" if port.link_type else port.type


def _deps(s: _Step) -> set[str]:
    return {src for refs in s.inputs.values() for src, _, _ in refs}


def _check_cycles(steps: Mapping[str, _Step], report: _Report) -> None:
    state: dict[str, int] = {}
    reported: set[str] = set()

    def visit(sid: str, trail: list[str]) -> None:
        state[sid] = 1
        trail.append(sid)
        for dep in sorted(_deps(steps[sid])):
            if dep not in steps:
                continue
            if state.get(dep) == 1:
                cycle = [*trail[trail.index(dep) :], dep]
                if dep not in reported:
                    reported.update(cycle)
                    s = steps[dep]
                    report.add(
                        Code.E_CYCLE,
                        "steps form a cycle: " + " -> ".join(cycle),
                        f"spec.steps[{s.index}].inputs",
                    )
            elif dep not in state:
                visit(dep, trail)
        trail.pop()
        state[sid] = 2

    for sid in sorted(steps, key=lambda k: steps[k].index):
        if sid not in state:
            visit(sid, [])


def _topological_order(steps: Mapping[str, _Step]) -> list[str]:
    done: list[str] = []
    remaining = dict(steps)
    while remaining:
        ready = sorted(sid for sid, s in remaining.items() if _deps(s) <= set(done))
        if not ready:  # unreachable after cycle/reference checks; never loop forever
            done.extend(sorted(remaining))
            break
        done.extend(ready)
        for sid in ready:
            del remaining[sid]
    return done


def _check_ifnames(steps: Mapping[str, _Step], report: _Report) -> None:
    """Interface names are unique across the topology (design §6.1). Each name's own
    validity is the config validator's (``validate_config`` reports ``E_IFNAME`` and the
    step never gets here)."""
    seen: dict[str, str] = {}
    for s in sorted(steps.values(), key=lambda s: s.index):
        if "ifName" not in s.config:
            continue
        name = s.config["ifName"]
        path = f"spec.steps[{s.index}].config.ifName"
        if name in seen:
            report.add(
                Code.E_IFNAME, f"interface name {name!r} is already used by step {seen[name]}", path
            )
        else:
            seen[name] = s.id
