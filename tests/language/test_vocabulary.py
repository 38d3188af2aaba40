"""One vocabulary, one NetworkPlugin model: the spellings that used to be copied agree."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import yaml

from dmn.api.plugin import NetworkPlugin as NetworkPluginCrd
from dmn.interpreter.documents import InputPort, OutputPort, PluginSpec
from dmn.vocabulary import terms
from dmn.vocabulary.terms import Access, HandleType, LinkType, Ownership, StepKind

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "charts/dra-multi-network/crds"
CRD = CRDS / "networkplugins.networking.dra-multi-network.schseba.github.io.yaml"


def test_each_closed_set_has_equal_enum_and_literal_spellings() -> None:
    pairs = [
        (terms.HandleType, terms.HandleTypeName),
        (terms.LinkType, terms.LinkTypeName),
        (terms.Access, terms.AccessName),
        (terms.Ownership, terms.OwnershipName),
        (terms.Hook, terms.HookName),
        (terms.StepKind, terms.StepKindName),
        (terms.RecoveryStrategy, terms.RecoveryName),
    ]
    for enum, literal in pairs:
        assert tuple(m.value for m in enum) == get_args(literal), enum.__name__


def test_the_crd_spec_is_the_checking_model() -> None:
    assert NetworkPluginCrd.model_fields["spec"].annotation is PluginSpec


def test_the_generated_crd_carries_the_vocabulary() -> None:
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    port = spec["properties"]["inputs"]["additionalProperties"]["properties"]
    out = spec["properties"]["outputs"]["additionalProperties"]["properties"]
    assert port["type"]["enum"] == [t.value for t in HandleType]
    assert port["linkType"]["enum"] == [t.value for t in LinkType]
    assert out["ownership"]["enum"] == [o.value for o in Ownership]
    assert spec["properties"]["stepKinds"]["items"]["enum"] == [k.value for k in StepKind]


def test_port_access_is_typed_by_the_model_though_the_crd_stores_it_as_payload() -> None:
    port = InputPort.model_validate({"type": "KernelInterface/v1", "access": ["Read"]})
    assert port.accesses() == {Access.READ}
    assert "ownership" in OutputPort.model_fields
