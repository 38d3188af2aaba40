"""Admission webhooks: call the ``Validating``/``MutatingWebhookConfiguration`` s stored in the lab.

Contract (what a webhook server sees, as from a real API server):

* ``POST`` to ``clientConfig.url`` (or, for ``clientConfig.service``, to the address the lab was
  told for that service: ``WebhookAdmission.services[(namespace, name)] = "127.0.0.1:8443"``;
  an unknown service is a call failure) with an ``admission.k8s.io/v1`` ``AdmissionReview``:
  ``uid``, ``kind``, ``resource``, ``subResource``, ``requestKind``/``requestResource``,
  ``name``, ``namespace``, ``operation``, ``userInfo``, ``object``, ``oldObject``, ``dryRun``,
  ``options``. HTTPS is verified against ``caBundle`` (else the system trust store).
* Matching: ``rules`` (operations, apiGroups, apiVersions, resources incl. ``*``,
  ``<res>/<sub>``, ``*/<sub>``, ``*/*``; scope), ``namespaceSelector`` and ``objectSelector``
  (matchLabels / matchExpressions). ``matchConditions`` and ``matchPolicy`` conversion are
  not evaluated: a hook is called for every request its rules match. For our chart's Pod
  webhooks that means every Pod CREATE/UPDATE reaches our server here, where the real API
  server sends only Pods with claims or extended-resource limits; our webhook admits the
  others unchanged itself (``controller/webhook/pods.py``), so the outcome is the same, but
  a lab test cannot show the filtering (``tests/chart`` evaluates those CEL conditions, the
  upstream lab runs them). ValidatingAdmissionPolicies are not evaluated at all (the NRI
  toleration policy is tested on the upstream lab). Configuration objects themselves are
  never sent to webhooks.
* Order: mutating webhooks (configuration name order, then list order; ``JSONPatch``
  responses applied; no reinvocation: ``reinvocationPolicy: IfNeeded`` is ignored), then
  schema validation, then validating webhooks.
* A denial becomes the error ``admission webhook "<name>" denied the request: <message>``
  with the response's code (raised to at least 400) and reason; a failed call fails the
  request with 500 InternalError under ``failurePolicy: Fail`` and is skipped under
  ``Ignore``. ``timeoutSeconds`` (default 10) bounds each call.

Requests made by the in-process controllers (garbage collector, namespace lifecycle) do not
pass through admission.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from . import errors, kinds, patches
from .errors import ApiError
from .selectors import Requirement, labels_match

if TYPE_CHECKING:
    from .store import AdmissionAttributes, Store

log = logging.getLogger(__name__)

_WEBHOOK_KINDS = {"validatingwebhookconfigurations", "mutatingwebhookconfigurations"}
_OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


def selector_requirements(selector: dict[str, Any] | None) -> tuple[Requirement, ...] | None:
    """A ``metav1.LabelSelector`` as requirements; None selects nothing."""
    if selector is None:
        return ()
    reqs = [Requirement(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator", ""))
        if op is None:
            return None
        reqs.append(Requirement(expr.get("key", ""), op, tuple(expr.get("values") or ())))
    return tuple(reqs)


class WebhookAdmission:
    """Admission by the webhook configurations currently in ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.services: dict[tuple[str, str], str] = {}

    # --- Admission protocol -----------------------------------------------------------------

    def mutate(self, attrs: AdmissionAttributes) -> dict[str, Any] | None:
        obj = attrs.obj
        if obj is None:
            return None
        for hook in self._matching("mutatingwebhookconfigurations", attrs):
            response = self._call(hook, attrs, obj)
            if response is None:
                continue
            patch = response.get("patch")
            if patch:
                if response.get("patchType", "JSONPatch") != "JSONPatch":
                    raise errors.internal(
                        f'webhook "{hook["name"]}" returned an unsupported patchType'
                    )
                operations = json.loads(base64.b64decode(patch))
                obj = patches.json_patch(obj, operations)
        return obj

    def validate(self, attrs: AdmissionAttributes) -> None:
        for hook in self._matching("validatingwebhookconfigurations", attrs):
            self._call(hook, attrs, attrs.obj)

    # --- matching ---------------------------------------------------------------------------

    def _matching(self, plural: str, attrs: AdmissionAttributes) -> list[dict[str, Any]]:
        if attrs.rt.group == "admissionregistration.k8s.io" and attrs.rt.plural in _WEBHOOK_KINDS:
            return []
        rt = self.store.resolve("admissionregistration.k8s.io", "v1", plural)
        if rt is None:
            return []
        configs, _rv, _next, _rest = self.store.list_objects(rt, "")
        hooks = []
        for config in configs:
            for hook in config.get("webhooks") or []:
                if self._matches(hook, attrs):
                    hooks.append(hook)
        return hooks

    def _matches(self, hook: dict[str, Any], attrs: AdmissionAttributes) -> bool:
        if not any(self._rule_matches(rule, attrs) for rule in hook.get("rules") or []):
            return False
        subject = attrs.obj if attrs.obj is not None else attrs.old
        object_reqs = selector_requirements(hook.get("objectSelector"))
        if object_reqs is None:
            return False
        if object_reqs and not any(
            o is not None and labels_match(object_reqs, o) for o in (attrs.obj, attrs.old)
        ):
            return False
        ns_reqs = selector_requirements(hook.get("namespaceSelector"))
        if ns_reqs is None:
            return False
        if ns_reqs:
            if attrs.rt.group == "" and attrs.rt.plural == "namespaces":
                return subject is not None and labels_match(ns_reqs, subject)
            if not attrs.rt.namespaced:
                return True
            try:
                namespace = self.store.get(kinds.NAMESPACES, "", attrs.namespace)
            except ApiError:
                return False
            return labels_match(ns_reqs, namespace)
        return True

    @staticmethod
    def _rule_matches(rule: dict[str, Any], attrs: AdmissionAttributes) -> bool:
        def has(values: list[str] | None, value: str) -> bool:
            return bool(values) and ("*" in values or value in values)  # type: ignore[operator]

        rt = attrs.rt
        if not has(rule.get("operations"), attrs.operation):
            return False
        if not has(rule.get("apiGroups"), rt.group) or not has(rule.get("apiVersions"), rt.version):
            return False
        scope = rule.get("scope", "*")
        if (scope == "Cluster" and rt.namespaced) or (scope == "Namespaced" and not rt.namespaced):
            return False
        for resource in rule.get("resources") or []:
            res, _, sub = resource.partition("/")
            if attrs.subresource:
                if sub and (res in ("*", rt.plural)) and sub in ("*", attrs.subresource):
                    return True
            elif not sub and res in ("*", rt.plural):
                return True
        return False

    # --- calling ----------------------------------------------------------------------------

    def _review(self, attrs: AdmissionAttributes, obj: dict[str, Any] | None) -> dict[str, Any]:
        rt = attrs.rt
        kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
        request: dict[str, Any] = {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": attrs.name,
            "operation": attrs.operation,
            "userInfo": attrs.user.as_dict(),
            "object": obj,
            "oldObject": attrs.old,
            "dryRun": attrs.dry_run,
            "options": {
                "apiVersion": "meta.k8s.io/v1",
                "kind": _OPTIONS_KIND[attrs.operation],
                **attrs.options,
            },
        }
        if attrs.namespace:
            request["namespace"] = attrs.namespace
        if attrs.subresource:
            request["subResource"] = attrs.subresource
            request["requestSubResource"] = attrs.subresource
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}

    def _call(
        self, hook: dict[str, Any], attrs: AdmissionAttributes, obj: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        name = hook.get("name", "")
        review = self._review(attrs, obj)
        try:
            response = self._post(hook, review)
        except Exception as exc:  # any transport or protocol failure is a failed call
            if hook.get("failurePolicy", "Fail") == "Ignore":
                log.warning("webhook call failed, ignored webhook=%s error=%s", name, exc)
                return None
            raise errors.internal(
                f'Internal error occurred: failed calling webhook "{name}": {exc}'
            ) from exc
        if response.get("uid") != review["request"]["uid"]:
            raise errors.internal(
                f'Internal error occurred: failed calling webhook "{name}": expected response '
                f"uid {review['request']['uid']!r}, got {response.get('uid')!r}"
            )
        if not response.get("allowed"):
            status = response.get("status") or {}
            code = max(int(status.get("code") or 403), 400)
            message = status.get("message") or status.get("reason")
            denied = f'admission webhook "{name}" denied the request'
            raise ApiError(
                code,
                status.get("reason") or "Forbidden",
                f"{denied}: {message}" if message else f"{denied} without explanation",
                status.get("details"),
            )
        return response

    def _post(self, hook: dict[str, Any], review: dict[str, Any]) -> dict[str, Any]:
        config = hook.get("clientConfig") or {}
        if config.get("url"):
            url = urlsplit(config["url"])
            scheme, netloc, path = url.scheme, url.netloc, url.path or "/"
        elif config.get("service"):
            service = config["service"]
            address = self.services.get((service.get("namespace", ""), service.get("name", "")))
            if address is None:
                raise ConnectionError(
                    f'service "{service.get("namespace")}/{service.get("name")}" is not known to '
                    "the lab"
                )
            scheme, netloc, path = "https", address, service.get("path") or "/"
        else:
            raise ValueError("webhook clientConfig needs url or service")
        timeout = float(hook.get("timeoutSeconds") or 10)
        body = json.dumps(review).encode()
        connection: http.client.HTTPConnection
        if scheme == "https":
            context = ssl.create_default_context()
            ca_bundle = config.get("caBundle")
            if ca_bundle:
                context = ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())
            connection = http.client.HTTPSConnection(netloc, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(netloc, timeout=timeout)
        try:
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            data = reply.read()
            if reply.status != 200:
                raise ConnectionError(f"webhook answered HTTP {reply.status}")
        finally:
            connection.close()
        parsed = json.loads(data)
        response = parsed.get("response") if isinstance(parsed, dict) else None
        if not isinstance(response, dict):
            raise ValueError("webhook response has no AdmissionReview.response")
        return response
