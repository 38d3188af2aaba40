"""Watch reconnect backoff with jitter (issue 13, deliverable 8).

Before: a failed list/watch waited exactly 0.2, 0.4, 0.8 ... seconds, so after an API
server restart every watch of every agent reconnected in lockstep. Now each wait is drawn
uniformly from [0, backoff] (full jitter) while the backoff still doubles up to its cap.
The server is a real unreachable address (connection refused), not a stub.
"""

from __future__ import annotations

import threading

import pytest

from dmn.api.cluster import Cluster, ListWatch, connect
from dmn.api.cluster import resources as r
from dmn.api.cluster.listwatch import jittered
from tests.waiting import wait_for

pytestmark = pytest.mark.adversarial


def _consume(lw: ListWatch) -> threading.Thread:
    thread = threading.Thread(target=lambda: [None for _ in lw.events()], daemon=True)
    thread.start()
    return thread


def test_waits_are_jittered_fractions_of_a_capped_doubling_backoff() -> None:
    draws = iter([0.5, 1.0, 0.25, 0.0, 0.5, 0.5, 0.5, 0.5] * 4)
    with Cluster(connect(url="http://127.0.0.1:9")) as dead:
        lw = ListWatch(dead, r.CONFIG_MAPS, "default", max_backoff=0.4, rand=lambda: next(draws))
        thread = _consume(lw)
        wait_for(lambda: len(lw.waits) >= 6, timeout=60, interval=0.01)
        lw.stop()
        thread.join(30)
    # backoff 0.2, 0.4, 0.4 (cap), ... times the draw; never below the 0.01 floor
    assert lw.waits[:6] == pytest.approx([0.1, 0.4, 0.1, 0.01, 0.2, 0.2])


def test_two_watches_do_not_retry_in_lockstep() -> None:
    with Cluster(connect(url="http://127.0.0.1:9")) as dead:
        a = ListWatch(dead, r.CONFIG_MAPS, "default", max_backoff=0.2)
        b = ListWatch(dead, r.CONFIG_MAPS, "default", max_backoff=0.2)
        threads = [_consume(a), _consume(b)]
        wait_for(lambda: len(a.waits) >= 5 and len(b.waits) >= 5, timeout=60, interval=0.01)
        a.stop()
        b.stop()
        for t in threads:
            t.join(30)
    assert a.waits[:5] != b.waits[:5]
    assert all(0.01 <= w <= 0.2 for w in a.waits + b.waits)


def test_jitter_is_bounded() -> None:
    assert jittered(2.0, lambda: 1.0) == 2.0
    assert jittered(2.0, lambda: 0.0) == 0.01
