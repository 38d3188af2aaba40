"""Health condition "API server reachable", for the readiness of the agent and the controller.

``GET /readyz`` on the API server with a short timeout, the answer cached for a few seconds so
a probe storm never turns into an API storm. Any answer from the server other than success,
or no answer, is "not reachable" with the reason as detail.
"""

from __future__ import annotations

import threading
import time

from .access import Cluster
from .errors import ApiFailure

CACHE_SECONDS = 5.0
TIMEOUT_SECONDS = 2.0


class ApiReachability:
    def __init__(self, cluster: Cluster, cache_seconds: float = CACHE_SECONDS) -> None:
        self.cluster = cluster
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._checked = float("-inf")
        self._verdict: tuple[bool, str] = (False, "not checked yet")

    def __call__(self) -> tuple[bool, str]:
        with self._lock:
            if time.monotonic() - self._checked < self.cache_seconds:
                return self._verdict
            try:
                response = self.cluster._send("GET", "/readyz", timeout=TIMEOUT_SECONDS)
                response.read()
                self._verdict = (True, "")
            except ApiFailure as exc:
                self._verdict = (False, f"API server: {exc}")
            self._checked = time.monotonic()
            return self._verdict
