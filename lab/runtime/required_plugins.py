"""containerd's NRI default validator's required-plugin check, for the lab NRI runtime.

Facts (containerd/nri ``pkg/plugin`` and ``plugins/default-validator``, as built into
containerd 2.3): after every plugin's CreateContainer, the validator refuses the container
when a required plugin is not among the plugins registered with the runtime. Required are
the node-wide ``required_plugins`` plus the plugins the Pod's *effective* annotation
``required-plugins.noderesource.dev`` lists (a YAML list; the key is looked up as
``<key>/container.<container name>``, then ``<key>/pod``, then ``<key>``, the first present
decides). A Pod whose effective tolerate annotation (the key containerd is configured with)
parses as a true boolean skips the check; a value that is no boolean, or a required-plugins
value that is no list of names, fails the container. A plugin is present under its name and
under ``<index>-<name>``.

The lab runtime runs this check so that the embedded lab holds containers exactly as a node
configured like the operator guide does (the upstream lab runs the real one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import yaml

REQUIRED_PLUGINS = "required-plugins.noderesource.dev"
#: the tolerate key the chart's agent Pods carry (``nri.tolerateMissingPluginsAnnotation``'s
#: default) and the labs configure their runtime with
TOLERATE_MISSING_PLUGINS = "tolerate-missing-nri-plugins.noderesource.dev"

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}  # Go's strconv.ParseBool


def effective_annotation(annotations: Mapping[str, str], key: str, container: str) -> str | None:
    """The value of ``key`` that applies to ``container``, None when none does."""
    for candidate in (f"{key}/container.{container}", f"{key}/pod", key):
        if candidate in annotations:
            return annotations[candidate]
    return None


@dataclass(frozen=True)
class RequiredPluginCheck:
    """``required``: the node-wide list; ``tolerate_annotation``: the configured key ("" none)."""

    required: tuple[str, ...] = ()
    tolerate_annotation: str = ""

    def refusal(
        self, annotations: Mapping[str, str], container: str, present: Iterable[str]
    ) -> str | None:
        """Why the container is refused, or None when it may be created."""
        if self.tolerate_annotation:
            value = effective_annotation(annotations, self.tolerate_annotation, container)
            if value is not None:
                if value not in _TRUE | _FALSE:
                    return f"invalid {self.tolerate_annotation} annotation {value!r}"
                if value in _TRUE:
                    return None
        required = list(self.required)
        value = effective_annotation(annotations, REQUIRED_PLUGINS, container)
        if value is not None:
            try:
                listed = yaml.safe_load(value)
            except yaml.YAMLError:
                listed = None
            if listed is None:
                listed = []
            if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
                return f"invalid {REQUIRED_PLUGINS} annotation {value!r}"
            required += listed
        names = set(present)
        missing = [r for r in required if r not in names]
        if not missing:
            return None
        if len(missing) == 1:
            return f"validation error: required plugin {missing[0]!r} not present"
        return f"validation error: required plugins {','.join(missing)!r} not present"


def present_names(full_names: Iterable[str]) -> set[str]:
    """Each registered plugin under ``<index>-<name>`` and under its name."""
    out: set[str] = set()
    for full in full_names:
        out.add(full)
        index, _, name = full.partition("-")
        if name and index.isdigit():
            out.add(name)
    return out
