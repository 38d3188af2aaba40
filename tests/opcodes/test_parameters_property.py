"""Arbitrary JSON against every opcode parameter model: the answer is a model or a
``ValidationError`` — never another exception (the binder relies on this)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dmn.opcodes.registry import ALL_SPECS
from dmn.opcodes.spec import OpcodeSpec

pytestmark = pytest.mark.property

_FIELD_NAMES = sorted({name for spec in ALL_SPECS for name in spec.parameters.model_fields})

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["bridge", "l2", "active-backup", "active", "vfio-pci", "eth0", "uverbs"])
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_payloads = st.dictionaries(st.sampled_from(_FIELD_NAMES) | st.text(max_size=8), _json, max_size=6)


@pytest.mark.parametrize("spec", sorted(ALL_SPECS, key=lambda s: s.name), ids=lambda s: s.name)
@settings(max_examples=50, deadline=None)
@given(payload=_payloads)
def test_arbitrary_json_is_a_model_or_a_validation_error(spec: OpcodeSpec, payload: Any) -> None:
    text = json.dumps(payload)
    try:
        model = spec.parameters.model_validate_json(text, strict=True)
    except ValidationError:
        return
    # accepted payloads round-trip to exactly the same parameters
    again = spec.parameters.model_validate_json(model.model_dump_json(), strict=True)
    assert again == model
