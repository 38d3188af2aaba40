"""Malformed AdmissionReviews sent raw over TLS to the real webhook server: each is denied
with a reason code in a well-formed AdmissionReview, never allowed unvalidated, never
answered with an exception's text, never left without an answer (issue 39, item 6)."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.controller.webhook.server import WebhookServer
from dmn.opcodes.registry import default_registry
from tests.webhook.certs import ThrowawayCA

pytestmark = pytest.mark.adversarial

G = "networking.dra-multi-network.schseba.github.io"
TOPOLOGY = {"group": G, "version": "v1alpha1", "kind": "NetworkTopology"}
GOOD = {
    "uid": "u-1",
    "kind": TOPOLOGY,
    "operation": "CREATE",
    "userInfo": {"username": "alice"},
    "object": {"apiVersion": f"{G}/v1alpha1", "kind": "NetworkTopology", "metadata": {}},
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebhookServer, Path]]:
    d = tmp_path_factory.mktemp("pki")
    ca = ThrowawayCA()
    (d / "ca.crt").write_bytes(ca.pem())
    ca.issue(d / "tls.crt", d / "tls.key")
    server = WebhookServer(
        None, default_registry(), cert_file=str(d / "tls.crt"), key_file=str(d / "tls.key")
    )
    server.start()
    yield server, d / "ca.crt"
    server.stop()


def send(served: tuple[WebhookServer, Path], body: bytes) -> tuple[int, dict[str, Any]]:
    server, ca_file = served
    host, port = server.url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(ca_file))
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    try:
        conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def review_of(request: Any) -> bytes:
    envelope = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
    return json.dumps({**envelope, "request": request}).encode()


def assert_denied(status: int, answer: dict[str, Any]) -> dict[str, Any]:
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["allowed"] is False
    text = json.dumps(response)
    assert "E_ADMISSION_MALFORMED" in text
    for leak in ("Traceback", "Error:", "RecursionError", "AttributeError", "KeyError"):
        assert leak not in text
    return response


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD.items() if k != key}


@pytest.mark.parametrize(
    "request_",
    [
        without("kind"),
        {**GOOD, "kind": {"group": G, "version": "v1", "kind": "Secret"}},
        {**GOOD, "kind": "NetworkTopology"},
        {**GOOD, "kind": {"kind": 7}},
        without("operation"),
        {**GOOD, "operation": "create"},
        {**GOOD, "operation": ["CREATE"]},
        {**GOOD, "userInfo": "alice"},
        {**GOOD, "userInfo": {"username": ["alice"]}},
        {**GOOD, "object": []},
        {**GOOD, "object": {**GOOD["object"], "metadata": []}},
        {**GOOD, "object": {**GOOD["object"], "spec": "x"}},
        {**GOOD, "oldObject": "x"},
        {**GOOD, "uid": 5},
        without("object"),
    ],
    ids=lambda r: json.dumps(r)[:60],
)
def test_malformed_requests_are_denied_with_a_reason_code(
    served: tuple[WebhookServer, Path], request_: dict[str, Any]
) -> None:
    response = assert_denied(*send(served, review_of(request_)))
    if isinstance(request_.get("uid"), str):
        assert response["uid"] == request_["uid"]


@pytest.mark.parametrize("depth", [150, 900, 1000, 5000])
def test_deeply_nested_bodies_are_denied(served: tuple[WebhookServer, Path], depth: int) -> None:
    nested = "[" * depth + "]" * depth
    body = review_of({**GOOD, "object": {"metadata": {}, "spec": {"x": "@"}}})
    body = body.replace(b'"@"', nested.encode())
    assert_denied(*send(served, body))


@pytest.mark.parametrize(
    "body",
    [b"[]", b'"x"', b"{}", b'{"apiVersion": "admission.k8s.io/v1", "request": []}'],
)
def test_bodies_that_are_not_reviews_are_denied(
    served: tuple[WebhookServer, Path], body: bytes
) -> None:
    assert_denied(*send(served, body))


def test_a_well_formed_review_is_still_validated(served: tuple[WebhookServer, Path]) -> None:
    """The shape check does not short-circuit validation: this empty topology is refused
    by the compiler, with the compiler's reason codes."""
    status, answer = send(served, review_of(GOOD))
    assert status == 200 and answer["response"]["allowed"] is False
    assert "E_ADMISSION_MALFORMED" not in json.dumps(answer)
