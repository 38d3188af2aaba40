"""NetworkTopology: a workload's network as a typed DAG of plugin steps (design §4.3).

Allocation steps are DRA roots (their authority is the allocation, they take no
inputs); Operation steps consume earlier outputs through ``inputs.<port>.from``.
``config`` and the per-port ``inputs`` bindings are bounded payloads whose fields the
compiler validates strictly against the locked plugin descriptor.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from dmn.api.model import (
    OPCODE_NAME,
    PAYLOAD_EXTRA,
    STEP_ID,
    ApiModel,
    Condition,
    DiagnosticEntry,
    RevisionRef,
    list_map,
    list_set,
    validations,
)
from dmn.vocabulary.terms import StepKindName

MAX_STEPS = 32
#: Kubernetes' extended resource names: a DNS-subdomain domain, '/', a qualified-name part
EXTENDED_RESOURCE_NAME = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
EXTENDED_RESOURCE_NAME_MAX = 253 + 1 + 63
MAX_ROOTS = 8
MAX_BUDGET = 64


class PluginRef(ApiModel):
    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class CelSelector(ApiModel):
    expression: str = Field(min_length=1, max_length=4096)


class HardwareSelector(ApiModel):
    """An administrator hardware constraint ANDed onto a root's mandatory selector."""

    cel: CelSelector


class Step(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": validations(
            ("self.kind == 'Operation' || !has(self.inputs)", "Allocation steps take no inputs"),
            (
                "self.kind == 'Allocation' || !has(self.hardwareSelectors)",
                "only Allocation steps carry hardwareSelectors",
            ),
            (
                "self.kind == 'Allocation' || !has(self.extendedResourceName)",
                "only Allocation steps name an extendedResourceName",
            ),
            (
                "!has(self.extendedResourceName)"
                " || !self.extendedResourceName.matches('^([^/]*[.])?kubernetes[.]io/')",
                "an extendedResourceName is not in the kubernetes.io domain",
            ),
        )
    }

    id: str = Field(min_length=1, max_length=40, pattern=STEP_ID)
    kind: StepKindName
    plugin_ref: PluginRef
    config: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra=PAYLOAD_EXTRA | {"maxProperties": 64}
    )
    inputs: dict[str, Any] | None = Field(
        default=None,
        # an object that preserves unknown fields, like config: kube-apiserver declares an
        # untyped additionalProperties schema to CEL as no field at all, so the rule
        # `!has(self.inputs)` failed to compile ("undefined field 'inputs'")
        json_schema_extra=PAYLOAD_EXTRA | {"maxProperties": 16},
    )
    hardware_selectors: list[HardwareSelector] | None = Field(default=None, max_length=4)
    extended_resource_name: str | None = Field(
        default=None,
        max_length=EXTENDED_RESOURCE_NAME_MAX,
        pattern=EXTENDED_RESOURCE_NAME,
        description=(
            "Allocation steps: the extended resource (`example.com/fast-net`) a Pod may ask "
            "for in `resources.limits` to get this root, set on the root's stable "
            "DeviceClass (`spec.extendedResourceName`); the scheduler then makes the claim."
        ),
    )

    @model_validator(mode="after")
    def _kind_invariants(self) -> Step:
        """The same local invariants the CRD enforces with x-kubernetes-validations."""
        if self.kind == "Allocation" and self.inputs is not None:
            raise ValueError("Allocation steps take no inputs")
        if self.kind == "Operation" and self.hardware_selectors is not None:
            raise ValueError("only Allocation steps carry hardwareSelectors")
        if self.kind == "Operation" and self.extended_resource_name is not None:
            raise ValueError("only Allocation steps name an extendedResourceName")
        if self.extended_resource_name is not None:
            domain = self.extended_resource_name.split("/")[0]
            if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
                raise ValueError("an extendedResourceName is not in the kubernetes.io domain")
        return self


class EffectBudget(ApiModel):
    allow: list[str] = list_set(max_items=MAX_BUDGET, default_factory=list)


class NetworkTopologySpec(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": validations(
            (
                f"self.steps.filter(s, s.kind == 'Allocation').size() <= {MAX_ROOTS}",
                f"at most {MAX_ROOTS} Allocation roots",
            ),
        )
    }

    effect_budget: EffectBudget = Field(default_factory=EffectBudget)
    steps: list[Step] = list_map("id", max_items=MAX_STEPS, min_length=1)


class RootClass(ApiModel):
    root_step: str = Field(max_length=40)
    #: the class of this revision (its name changes with every new revision)
    device_class_name: str = Field(max_length=253)
    #: the root's stable class: same name across revisions, follows the newest Ready one
    stable_device_class_name: str | None = Field(default=None, max_length=253)


class DeviceMatch(ApiModel):
    """How many published devices one root's DeviceClass selects (its real CEL selectors
    over the newest complete pools of every node's ResourceSlices)."""

    root_step: str = Field(max_length=40)
    device_class_name: str = Field(max_length=253)
    devices: int = Field(ge=0)
    nodes: int = Field(ge=0)
    #: devices on which a selector failed with a CEL runtime error (upstream aborts the
    #: allocation attempt that reaches one)
    selector_errors: int = Field(default=0, ge=0)


class NetworkTopologyStatus(ApiModel):
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] | None = list_map("type", max_items=16, default=None)
    revision: RevisionRef | None = None
    roots: list[RootClass] | None = list_map("rootStep", max_items=MAX_ROOTS, default=None)
    diagnostics: list[DiagnosticEntry] | None = Field(default=None, max_length=64)
    #: per root of the Ready revision: the devices its class selects (condition
    #: ``DevicesMatched`` is False with E_NO_MATCHING_DEVICES when one selects none)
    device_matches: list[DeviceMatch] | None = list_map(
        "deviceClassName", max_items=MAX_ROOTS, default=None
    )


class NetworkTopology(ApiModel):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["NetworkTopology"] = "NetworkTopology"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: NetworkTopologySpec
    status: NetworkTopologyStatus | None = None


OPCODE_PATTERN = OPCODE_NAME
