"""Property: any split of the trunk and any interleaving of two logical connections
reassembles exactly, in both the agent's and the lab's implementation."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.agent.nri import mux
from dmn.agent.nri import ttrpc_frame as t
from dmn.lab.runtime import wire

pytestmark = pytest.mark.property

bodies = st.lists(st.binary(min_size=0, max_size=9000), min_size=0, max_size=5)


@st.composite
def trunk(draw: st.DrawFn) -> tuple[bytes, dict[int, list[bytes]]]:
    messages = {1: draw(bodies), 2: draw(bodies)}
    # each connection's byte stream, cut into mux frames of random sizes <= 4096
    queues: dict[int, list[bytes]] = {}
    for conn, msgs in messages.items():
        stream = b"".join(t.encode_frame(2 * i + 1, t.TYPE_REQUEST, m) for i, m in enumerate(msgs))
        chunks, pos = [], 0
        while pos < len(stream):
            size = draw(st.integers(1, mux.MAX_SEND_PAYLOAD))
            chunks.append(mux.encode(conn, stream[pos : pos + size], chunk=size))
            pos += size
        queues[conn] = chunks
    # interleave the two frame sequences, preserving order within each connection
    out = []
    while queues[1] or queues[2]:
        pick = draw(st.sampled_from([c for c in (1, 2) if queues[c]]))
        out.append(queues[pick].pop(0))
    return b"".join(out), messages


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trunk(), st.lists(st.integers(0, 100_000), max_size=12))
def test_random_splits_and_interleavings_reassemble(
    data: tuple[bytes, dict[int, list[bytes]]], cuts: list[int]
) -> None:
    raw, messages = data
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]

    demux = mux.Demultiplexer()
    readers = {1: t.FrameReader(), 2: t.FrameReader()}
    got: dict[int, list[bytes]] = {1: [], 2: []}
    lab = wire.TrunkReader()
    lab_got: dict[int, list[bytes]] = {1: [], 2: []}
    for piece in pieces:
        for conn, payload in demux.feed(piece):
            assert len(payload) <= mux.MAX_SEND_PAYLOAD
            got[conn] += [f.data for f in readers[conn].feed(payload)]
        for conn in set(lab.push(piece)):
            lab_got[conn] += [body for _, _, _, body in lab.messages(conn)]
    assert got == messages
    assert lab_got == messages
    assert demux.pending == 0
