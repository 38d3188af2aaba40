"""Pod admission's node-capability half: only nodes able to run a Pod's revisions (pure).

Why (design §9.3): a revision needs the executor contracts it was compiled against; a node
whose agent runs others (an older build during a rollout, or no agent) refuses the claim at
NodePrepare, after the scheduler already placed the Pod there. The controller labels every
Node with one key per *requirement* its agent satisfies
(:func:`dmn.api.node_capability.revision_requirement`, ``Requirement.key``); admission makes
the scheduler honour them. For a Pod of ours the mutating webhook adds ``{key: K, operator:
Exists}`` for the key of each revision the Pod uses to every term of its required node
affinity (terms are ORed, so each term must carry them); the validating webhook refuses a
created Pod with a term lacking one, and a Pod whose ``spec.nodeName`` binds it directly to a
Node that lacks one — binding by name skips the scheduler, so it must not skip this check.

A term with neither expressions nor fields matches no node at all in Kubernetes: it is left
as it is (adding our expressions would widen it). Everything here is data in, decision out,
and never raises on any JSON value.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.api.node_capability import revision_requirement
from dmn.interpreter.diagnostics import Code, Diagnostic

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
AFFINITY_PATH = "spec.affinity"
TERMS_PATH = f"{AFFINITY_PATH}.nodeAffinity.{REQUIRED}.nodeSelectorTerms"


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def revision_ref(cls: Any) -> Mapping[str, Any] | None:
    """The ``revisionRef`` of a DeviceClass's TopologyRootConfiguration, None without one."""
    for cfg in _list(_map(_map(cls).get("spec")).get("config")):
        params = _map(_map(_map(cfg).get("opaque")).get("parameters"))
        if params.get("kind") == "TopologyRootConfiguration":
            ref = params.get("revisionRef")
            return ref if isinstance(ref, Mapping) else None
    return None


@dataclass
class Needs:
    """The label keys a Pod's revisions need, which revisions need each, and a warning per
    class whose revision adds none (the node's own checks alone decide for it)."""

    keys: dict[str, list[str]] = field(default_factory=dict)  # key -> revision names
    warnings: list[str] = field(default_factory=list)


def revision_names(classes: Iterable[Any]) -> list[str]:
    """The revisions ``classes`` (the DeviceClasses of ours a Pod uses) pin, each once."""
    names: list[str] = []
    for cls in classes:
        name = _map(revision_ref(cls)).get("name")
        if isinstance(name, str) and name and name not in names:
            names.append(name)
    return names


def needs(
    uses: Iterable[tuple[str, str]],
    classes: Mapping[str, Any],
    revisions: Mapping[str, Any],
) -> Needs:
    """What the classes of ``uses`` ((field path, class name) pairs, all of ours) require
    of a node. A revision that does not exist, is not the one the class pins (another
    digest) or does not record its opcode contracts adds no key, with a warning."""
    out = Needs()
    seen: set[tuple[str, str]] = set()
    for path, class_name in uses:
        ref = _map(revision_ref(classes.get(class_name)))
        name = ref.get("name")
        named = isinstance(name, str) and bool(name)
        once = ("revision", str(name)) if named else ("class", class_name)
        if once in seen:
            continue
        seen.add(once)
        where = f"DeviceClass {class_name!r} ({path})"
        if named:
            where = f"NetworkTopologyRevision {name!r} of {where}"
            problem = _revision_problem(str(name), ref, revisions, out)
        else:
            problem = "names no NetworkTopologyRevision"
        if problem:
            out.warnings.append(
                f"{where} {problem}: no node affinity was added for it; the node agent's own "
                "checks at NodePrepare decide whether its node can run it"
            )
    return out


def _revision_problem(
    name: str, ref: Mapping[str, Any], revisions: Mapping[str, Any], out: Needs
) -> str:
    """Why the revision ``ref`` pins adds no key ("" when it added its key to ``out``)."""
    revision = revisions.get(name)
    if not isinstance(revision, Mapping):
        return "does not exist"
    spec = _map(revision.get("spec"))
    if spec.get("digest") != ref.get("digest"):
        return "is not the revision the class pins (another digest)"
    try:
        requirement = revision_requirement(revision)
    except (TypeError, AttributeError, ValueError):
        requirement = None
    if requirement is None:
        return "does not record its opcode contracts (compiled before they were recorded)"
    out.keys.setdefault(requirement.key, []).append(name)
    return ""


def _exists(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "Exists"}


def _requires(expressions: Any, key: str) -> bool:
    return isinstance(expressions, list) and any(
        isinstance(e, Mapping)
        and e.get("key") == key
        and e.get("operator") == "Exists"
        and not e.get("values")
        for e in expressions
    )


def _matches_nothing(term: Mapping[str, Any]) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


def required_terms(affinity: Any) -> list[Any] | None:
    """The Pod's required node selector terms ([] when it has none), None when a level on
    the way is not an object or the terms are not a list."""
    current: Any = affinity
    for name in ("nodeAffinity", REQUIRED, "nodeSelectorTerms"):
        if current is None:
            return []
        if not isinstance(current, Mapping):
            return None
        current = current.get(name)
    if current is None:
        return []
    return current if isinstance(current, list) else None


def _readable(terms: list[Any]) -> bool:
    return all(
        isinstance(t, Mapping) and isinstance(t.get("matchExpressions") or [], list) for t in terms
    )


def with_keys(affinity: Any, keys: Iterable[str]) -> tuple[dict[str, Any] | None, str]:
    """``affinity`` with every key required in each term that can match a node (one new
    term when there is none), every other field kept; (None, "") when nothing changes, and
    (None, why) when the affinity is not of a Pod's shape (left alone; validation refuses)."""
    wanted = sorted(set(keys))
    if not wanted:
        return None, ""
    terms = required_terms(affinity)
    if terms is None or not _readable(terms):
        return None, f"{AFFINITY_PATH} is not of a Pod's shape"
    new_terms: list[Any] = []
    changed = not terms
    for term in terms:
        missing = [k for k in wanted if not _requires(term.get("matchExpressions"), k)]
        if _matches_nothing(term) or not missing:
            new_terms.append(term)
            continue
        expressions = [*(term.get("matchExpressions") or []), *map(_exists, missing)]
        new_terms.append({**term, "matchExpressions": expressions})
        changed = True
    if not changed:
        return None, ""
    if not terms:
        new_terms = [{"matchExpressions": [_exists(k) for k in wanted]}]
    base = dict(_map(affinity))
    node = dict(_map(base.get("nodeAffinity")))
    required = dict(_map(node.get(REQUIRED)))
    required["nodeSelectorTerms"] = new_terms
    node[REQUIRED] = required
    base["nodeAffinity"] = node
    return copy.deepcopy(base), ""


def _revisions(need: Needs, key: str) -> str:
    return ", ".join(repr(n) for n in need.keys.get(key, ()))


def affinity_denials(affinity: Any, need: Needs) -> list[Diagnostic]:
    """``E_POD_NODE_CAPABILITY`` per term (or for the whole affinity) that lets the Pod
    onto a node without one of ``need``'s keys."""
    if not need.keys:
        return []
    terms = required_terms(affinity)
    if terms is None:
        return [_capability(AFFINITY_PATH, "is not of a Pod's shape", sorted(need.keys), need)]
    if not terms:
        return [_capability(TERMS_PATH, "has no term", sorted(need.keys), need)]
    denials: list[Diagnostic] = []
    for i, term in enumerate(terms):
        path = f"{TERMS_PATH}[{i}]"
        if not isinstance(term, Mapping):
            denials.append(_capability(path, "is not a term", sorted(need.keys), need))
            continue
        if _matches_nothing(term):
            continue
        missing = [k for k in sorted(need.keys) if not _requires(term.get("matchExpressions"), k)]
        if missing:
            denials.append(_capability(f"{path}.matchExpressions", "lacks", missing, need))
    return denials


def _capability(path: str, what: str, keys: list[str], need: Needs) -> Diagnostic:
    shown = ", ".join(f"{{key: {k}, operator: Exists}}" for k in keys)
    revisions = "; ".join(f"{k} for revision {_revisions(need, k)}" for k in keys)
    return Diagnostic(
        Code.E_POD_NODE_CAPABILITY,
        f"the Pod uses a network of dra-multi-network, so its required node affinity must "
        f"admit only nodes whose agent runs the revision's executor contracts ({revisions}); "
        f"{path} {what} {shown} (the mutating webhook adds it: was the Pod created around it?)",
        path=path,
    )


def node_denials(node_name: Any, nodes: Mapping[str, Any], need: Needs) -> list[Diagnostic]:
    """``E_POD_NODE_BYPASS`` when ``spec.nodeName`` binds the Pod to a Node that does not
    exist or lacks one of ``need``'s keys (binding by name skips the scheduler)."""
    if not need.keys or not isinstance(node_name, str) or not node_name:
        return []
    node = nodes.get(node_name)
    if not isinstance(node, Mapping):
        what = "does not exist"
    else:
        labels = _map(_map(node.get("metadata")).get("labels"))
        missing = [k for k in sorted(need.keys) if k not in labels]
        if not missing:
            return []
        what = "lacks " + "; ".join(
            f"the label {k} (revision {_revisions(need, k)})" for k in missing
        )
    return [
        Diagnostic(
            Code.E_POD_NODE_BYPASS,
            f"spec.nodeName binds the Pod to Node {node_name[:253]!r}, which {what}: its node "
            "agent is not known to run the executor contracts of the Pod's networks, and "
            "direct nodeName binding cannot bypass that check; leave nodeName empty and let "
            "the scheduler choose a capable node",
            path="spec.nodeName",
        )
    ]
