"""The lab's Kubernetes API server (design §10): real client code runs against it unchanged.

Start API (stable)::

    server = LabApiServer(port=0)      # options: store, history_limit, tls, tokens,
    url = server.start()               #   bookmark_interval, webhooks, state (see .server)
    server.stop()                      # or: with LabApiServer() as server: ...
    LabApiServer(state="lab.json")     # objects restored from / saved to a JSON file
    serve("127.0.0.1", 6443)           # blocking; also python -m dmn.lab.apiserver

Modules: :mod:`.server` (HTTP edge, watch streaming), :mod:`.store` (storage semantics),
:mod:`.strategy` (per-kind rules), :mod:`.controllers` (GC, namespace and CRD lifecycle),
:mod:`.schema` + :mod:`.cel_rules` (CRD validation), :mod:`.builtin_schema`, :mod:`.patches`,
:mod:`.selectors`,
:mod:`.admission` (webhooks), :mod:`.discovery`, :mod:`.openapi`, :mod:`.table`.

Served kinds: core/v1 Namespace, Pod (+status, binding), Node (+status), Event, ConfigMap,
Secret, ServiceAccount; coordination.k8s.io/v1 Lease; events.k8s.io/v1 Event;
resource.k8s.io/v1 ResourceSlice, DeviceClass, ResourceClaim (+status),
ResourceClaimTemplate; apiextensions.k8s.io/v1 CustomResourceDefinition (+status);
admissionregistration.k8s.io/v1 Validating/MutatingWebhookConfiguration; and every custom
resource a CRD defines (+status when the CRD declares it). Verbs: get, list, watch, create,
update, patch, delete, deletecollection.

Knowingly different from a real API server:

* Built-in kinds are checked against the upstream OpenAPI schemas when the optional
  ``kubernetes-validate`` package is installed (:mod:`.builtin_schema`), not by the Go
  validation (formats inside specs, CEL compilation, immutability) — except the
  ResourceClaim update rules the DRA flow relies on (``strategy``); no built-in defaulting;
  unknown fields are kept rather than dropped.
* Request and response bodies are JSON only (protobuf/CBOR/YAML bodies get 415); no
  server-side apply (``apply-patch+yaml`` gets 415); strategic merge takes its list merge
  keys from the upstream schemas (a small built-in table without ``kubernetes-validate``)
  and ignores ``$retainKeys``/``$setElementOrder``.
* Lists always serve the latest state (``resourceVersion`` only checks it is not too old);
  ``continue`` pages are not a snapshot.
* Controllers (GC, namespace, CRD cleanup) run synchronously inside the write that
  triggers them, and bypass admission; a real cluster does this asynchronously.
* Status updates replace only ``status`` for every kind (a real Pod status update also
  takes metadata changes). CRD ``status.acceptedNames`` is set at creation only.
* CRD validation: structural keywords and CEL rules (standard CEL environment, no
  Kubernetes CEL libraries or cost limits; rules the environment cannot evaluate are
  skipped), no validation ratcheting, no conversion webhooks (versions share storage, only
  ``apiVersion`` changes), the CRD's own schema is not checked for structural-ness.
* On update, server-owned metadata (uid, creationTimestamp, deletionTimestamp, generation)
  is silently kept from the stored object instead of a 422 for an attempted change.
* No authorization; optional bearer-token authentication; impersonation headers honoured.
* OpenAPI: ``/openapi/v3`` names patch parameters only (enough for ``kubectl apply``), no
  model schemas, no ``/openapi/v2``. Table printing for built-ins shows Name/Age (+Pod
  status/node), not kubectl's full built-in columns.
* No aggregated discovery, no managedFields, no watch-list streaming beyond
  ``sendInitialEvents``, no API priority and fairness, no audit.
"""

from .identity import LAB_ADMIN, UserInfo
from .server import LabApiServer, serve
from .store import Store

__all__ = ["LAB_ADMIN", "LabApiServer", "Store", "UserInfo", "serve"]
