"""The OVSDB session's JSON-RPC parser against ``ovs.json``'s own (pure-Python) parser.

Both are driven the way ``ovs.jsonrpc.Connection.recv`` drives them: a stream of messages
cut into arbitrary pieces, a fresh parser per message, each ``feed`` returning how many
characters it took. They must give the same values, consume the same characters, and both
refuse what is not JSON.
"""

from __future__ import annotations

import json
from typing import Any

import ovs.json
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmn.opcodes.ovs.json_stream import _ORIGINAL_PARSER, JsonStreamParser, use_for_ovsdb

pytestmark = pytest.mark.property

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=20,
)
_messages = st.one_of(st.lists(_values, max_size=4), st.dictionaries(st.text(max_size=6), _values))


def _drive(make: Any, text: str, cuts: list[int]) -> list[Any]:
    """:func:`_feed` with ``ovs.json.Parser`` set to ``make`` meanwhile (``ovs.json``'s class
    looks itself up there)."""
    installed = ovs.json.Parser
    ovs.json.Parser = make
    try:
        return _feed(make, text, cuts)
    finally:
        ovs.json.Parser = installed


def _feed(make: Any, text: str, cuts: list[int]) -> list[Any]:
    """Feed ``text`` in the pieces ``cuts`` gives, as the JSON-RPC connection does; return
    each finished value (or error string) and the characters left unconsumed."""
    pieces, last = [], 0
    for cut in sorted(c % (len(text) + 1) for c in cuts):
        pieces.append(text[last:cut])
        last = cut
    pieces.append(text[last:])
    out: list[Any] = []
    parser, pending = None, ""
    for piece in pieces:
        pending += piece
        while pending:
            if parser is None:
                parser = make()
            pending = pending[parser.feed(pending) :]
            if parser.is_done():
                out.append(parser.finish())
                parser = None
            elif pending:
                raise AssertionError("a parser that is not done must take everything")
    return out + ([("open", parser.finish())] if parser is not None else [])


@settings(max_examples=100, deadline=None)
@given(st.lists(_messages, min_size=1, max_size=4), st.lists(st.integers(0, 10_000), max_size=8))
def test_same_values_and_consumption_as_ovs_json(messages: list[Any], cuts: list[int]) -> None:
    text = "".join(
        json.dumps(m, ensure_ascii=bool(i % 2)) + "\n" * (i % 2) for i, m in enumerate(messages)
    )
    ours = _drive(JsonStreamParser, text, cuts)
    theirs = _drive(_ORIGINAL_PARSER, text, cuts)
    for a, b in zip(ours, theirs, strict=False):
        if isinstance(b, str):  # ovs.json refused it (a NUL in a string): the stream ends
            assert isinstance(a, str), (a, b)
            return
        assert repr(a) == repr(b) or (isinstance(a, tuple) and isinstance(b, tuple))
    # a trailing newline leaves a fresh parser open on whitespace, in both
    assert len(ours) == len(theirs) == len(messages) + (len(messages) % 2 == 0)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1.0, "b": 1e2, "c": -0.0, "d": 1.5, "e": 9223372036854775808, "f": 1e-400}',
        '["\\"]", "\\\\", "[{", "\\u00e9\\ud83d\\ude00"]',
        '{"nested": [[[{"x": []}]]], "s": "}]"}',
    ],
)
def test_numbers_escapes_and_brackets_in_strings(text: str) -> None:
    ours, theirs = _drive(JsonStreamParser, text, [3, 7, 11]), _drive(_ORIGINAL_PARSER, text, [])
    assert ours == theirs
    for a, b in zip(ours, theirs, strict=True):
        assert repr(a) == repr(b)  # int stays int, float stays float


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', '{"a": 1e999}', '{"a" 1}', "[1, 2,]", '{"a": "\x01"}', "[tru]", "[" * 1001],
)
def test_refuses_what_ovs_json_refuses(text: str) -> None:
    """The first message is an error string in both (the connection then closes with
    EPROTO, so what either would make of the rest does not matter)."""
    ours, theirs = _drive(JsonStreamParser, text, [2]), _drive(_ORIGINAL_PARSER, text, [])
    assert isinstance(theirs[0], str) and isinstance(ours[0], str), (ours, theirs)


def test_installed_for_every_connection() -> None:
    use_for_ovsdb()
    assert ovs.json.Parser is JsonStreamParser
    use_for_ovsdb()
    assert ovs.json.Parser is JsonStreamParser
