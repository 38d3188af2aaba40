"""Admission webhooks registered in the lab are called over HTTPS with AdmissionReview v1."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dmn.lab.apiserver import LabApiServer

from .conftest import make_client, unique
from .tls_material import self_signed


class _Webhook(BaseHTTPRequestHandler):
    reviews: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        self.reviews.append(review)
        response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
        obj = request.get("object") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if self.path == "/validate" and labels.get("deny") == "true":
            response = {
                "uid": request["uid"],
                "allowed": False,
                "status": {"code": 422, "reason": "Invalid", "message": "deny label set"},
            }
        elif self.path == "/mutate":
            patch = [{"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes"}}]
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        data = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, bytes]]:
    directory: Path = tmp_path_factory.mktemp("webhook-tls")
    cert, key, pem = self_signed(directory)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Webhook)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", pem
    server.shutdown()
    server.server_close()


@pytest.fixture
def admitted(webhook: tuple[str, bytes]) -> Iterator[client.ApiClient]:
    url, pem = webhook
    bundle = base64.b64encode(pem).decode()
    rules = [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["configmaps"],
            "scope": "Namespaced",
        }
    ]
    with LabApiServer() as server, make_client(server.url) as api:
        reg = client.AdmissionregistrationV1Api(api)
        reg.create_validating_webhook_configuration(
            {
                "metadata": {"name": "deny"},
                "webhooks": [
                    {
                        "name": "deny.lab.example.com",
                        "clientConfig": {"url": url + "/validate", "caBundle": bundle},
                        "rules": rules,
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "objectSelector": {
                            "matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]
                        },
                    }
                ],
            }
        )
        reg.create_mutating_webhook_configuration(
            {
                "metadata": {"name": "mutate"},
                "webhooks": [
                    {
                        "name": "mutate.lab.example.com",
                        "clientConfig": {"url": url + "/mutate", "caBundle": bundle},
                        "rules": rules,
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "namespaceSelector": {"matchLabels": {"admit": "yes"}},
                    }
                ],
            }
        )
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "admit", "labels": {"admit": "yes"}}})
        yield api


def test_validating_webhook_denies(admitted: client.ApiClient) -> None:
    core = client.CoreV1Api(admitted)
    _Webhook.reviews.clear()
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "x", "labels": {"deny": "true"}}}
        )
    body = json.loads(err.value.body)
    assert err.value.status == 422
    assert (
        body["message"]
        == 'admission webhook "deny.lab.example.com" denied the request: deny label set'
    )
    request = _Webhook.reviews[-1]["request"]
    assert request["operation"] == "CREATE" and request["kind"] == {
        "group": "",
        "version": "v1",
        "kind": "ConfigMap",
    }
    assert request["resource"]["resource"] == "configmaps" and request["namespace"] == "default"
    assert request["userInfo"]["username"] == "lab-admin"
    # objectSelector excludes objects labelled skip
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "y", "labels": {"deny": "true", "skip": "1"}}}
    )


def test_mutating_webhook_patches_and_user_is_impersonated(admitted: client.ApiClient) -> None:
    core = client.CoreV1Api(admitted)
    _Webhook.reviews.clear()
    created = core.create_namespaced_config_map(
        "admit",
        {"metadata": {"name": "m"}},
        _headers={"Impersonate-User": "system:serviceaccount:dmn:controller"},
    )
    assert created.metadata.annotations == {"mutated": "yes"}
    users = {r["request"]["userInfo"]["username"] for r in _Webhook.reviews}
    assert users == {"system:serviceaccount:dmn:controller"}
    # outside the namespaceSelector: not mutated
    plain = core.create_namespaced_config_map("default", {"metadata": {"name": unique("m")}})
    assert not plain.metadata.annotations


def test_update_sends_old_object_and_dry_run(admitted: client.ApiClient) -> None:
    core = client.CoreV1Api(admitted)
    core.create_namespaced_config_map("default", {"metadata": {"name": "u"}, "data": {"a": "1"}})
    _Webhook.reviews.clear()
    core.patch_namespaced_config_map("u", "default", {"data": {"a": "2"}}, dry_run="All")
    request = _Webhook.reviews[-1]["request"]
    assert request["operation"] == "UPDATE" and request["dryRun"] is True
    assert request["oldObject"]["data"] == {"a": "1"} and request["object"]["data"] == {"a": "2"}
    assert core.read_namespaced_config_map("u", "default").data == {"a": "1"}


@pytest.mark.parametrize(("policy", "code"), [("Fail", 500), ("Ignore", None)])
def test_failure_policy(policy: str, code: int | None) -> None:
    rules = [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["secrets"],
        }
    ]
    with LabApiServer() as server, make_client(server.url) as api:
        client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(
            {
                "metadata": {"name": "down"},
                "webhooks": [
                    {
                        "name": "down.lab.example.com",
                        "clientConfig": {"url": "https://127.0.0.1:1/x"},
                        "rules": rules,
                        "failurePolicy": policy,
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 2,
                    }
                ],
            }
        )
        core = client.CoreV1Api(api)
        if code is None:
            core.create_namespaced_secret("default", {"metadata": {"name": "s"}})
        else:
            with pytest.raises(ApiException) as err:
                core.create_namespaced_secret("default", {"metadata": {"name": "s"}})
            assert err.value.status == code
            message = json.loads(err.value.body)["message"]
            assert message.startswith(
                'Internal error occurred: failed calling webhook "down.lab.example.com"'
            )
