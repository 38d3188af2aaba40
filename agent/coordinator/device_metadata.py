"""KEP-5304 device metadata: what a prepared claim gave the workload, as a file in its containers.

Kubernetes v1.37 (``DRADeviceMetadata``, beta) lets a DRA driver tell a container which
devices it got: the driver writes one JSON file per claim request on the node and a CDI spec
that bind-mounts it read-only into the container, and returns that CDI device's id in the
NodePrepareResources answer, so the kubelet passes it to the runtime with the claim's other
CDI devices. This module does what the upstream Go helper
(k8s.io/dynamic-resource-allocation ``kubeletplugin``, ``EnableDeviceMetadata``) does, with
the same layout, so a consumer written for any driver reads ours:

* the file on the node: ``<plugin data dir>/dra-device-metadata/<claimNs>_<claimName>/
  <request>/metadata.json``, where the plugin data dir is the one the agent serves its kubelet
  socket in (``<kubelet plugins dir>/<driver>``: the agent's own directory, from the node's
  flags, never from a claim or a topology);
* the CDI spec: ``<cdi dir>/<driver>_metadata_<claimUID>_<request>.json``, kind
  ``<driver>/metadata``, one device ``<claimUID>_<request>`` whose only edit is the read-only
  bind mount; its id ``<driver>/metadata=<claimUID>_<request>`` is added to the first device
  of that request in the answer;
* the path in the container: ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/
  <claimName>/<request>/<driver>-metadata.json``, or ``.../resourceclaimtemplates/
  <podClaimName>/...`` for a claim made from a template (the claim's
  ``resource.kubernetes.io/pod-claim-name`` annotation);
* the content: a stream of the same ``DeviceMetadata`` object once per API version, newest
  first (``metadata.resource.k8s.io/v1beta1`` then ``v1alpha1``): the claim's name,
  namespace, UID and a generation, ``podClaimName``, and per request its devices (driver,
  pool, name, the attributes the node publishes for the device in its ResourceSlice, and
  ``networkData``). A subrequest keeps its full ``<request>/<subrequest>`` name in the
  content; the paths use the base request.

What the node adds after NodePrepare: once the Pod's sandbox is Ready, the file is rewritten
(generation + 1) with each device's ``networkData`` (interface name, addresses, MAC — what
the journal recorded, as in the claim status) and what a VFIO or RDMA grant gave as
attributes (``grantPciAddress``, ``grantIommuGroup``, ``grantRdmaDevice``,
``grantCdiDevice`` under the driver's domain). The sandbox's removal rewrites it without
them. Containers are created after RunPodSandbox returns, so each mounts the content of its
time.

Ownership and crash safety. Every write is atomic (a temporary file in the same directory,
fsync, rename, fsync of the directory). The files are written only while the journal holds
the claim's preparation (after Prepared, under the claim's lock) and removed by NodeUnprepare
before the preparation is released, so none outlives the record that proves it ours. The
metadata file's content changes legitimately (generation, network data), so ownership is
proven by what does not change: the first object's ``metadata.uid`` is the claim's UID and
every device names this driver. The CDI spec's bytes never change: it is ours only when
it holds exactly the bytes this module renders for the claim, request and paths. Anything
else at one of these paths is not ours: it is never overwritten (``E_DEVICE_METADATA``,
retryable: a claim of the same name whose files are still there) and never removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmn.agent.coordinator.verify import Refusal

log = logging.getLogger(__name__)

GROUP = "metadata.resource.k8s.io"
VERSIONS = ("v1beta1", "v1alpha1")
"""The API versions written, newest first (the Go helper requires the newest, v1beta1 in
v0.37; v1alpha1 is kept for consumers built against v1.36)."""
KIND = "DeviceMetadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
CLAIMS_SUBDIR = "resourceclaims"
TEMPLATES_SUBDIR = "resourceclaimtemplates"
HOST_SUBDIR = "dra-device-metadata"
HOST_FILE = "metadata.json"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
CDI_VERSION = "0.6.0"  # annotations need 0.6.0; mounts alone are older
OWNER_ANNOTATION = "dra-multi-network.schseba.github.io/metadata-owner"
MAX_ATTRIBUTES = 32  # v1beta1 validation: at most 32 attributes per device
GRANT_ATTRIBUTES = {
    "pciAddress": "grantPciAddress",
    "iommuGroup": "grantIommuGroup",
    "rdmaDevice": "grantRdmaDevice",
}
"""Claim-status ``data`` keys (:func:`~dmn.agent.coordinator.network_data.device_data`)
and the attribute each becomes in the metadata file; ``cdiDevices`` becomes
``grantCdiDevice`` (the first)."""

Attributes = Mapping[str, Mapping[str, Any]]


def base_request(request: str) -> str:
    """The request of a ``<request>/<subrequest>`` reference (paths use only the request)."""
    return request.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class ClaimIdentity:
    namespace: str
    name: str
    uid: str
    pod_claim_name: str | None = None
    """``pod.spec.resourceClaims[].name`` of a claim made from a template, else None."""

    @classmethod
    def of(cls, claim: Mapping[str, Any]) -> ClaimIdentity:
        meta = claim.get("metadata") or {}
        pod_claim = (meta.get("annotations") or {}).get(POD_CLAIM_ANNOTATION)
        return cls(
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
            str(pod_claim) if pod_claim else None,
        )


@dataclass(frozen=True, slots=True)
class MetadataDevice:
    """One allocated device as the metadata file lists it."""

    pool: str
    name: str
    attributes: Attributes = field(default_factory=dict)
    network_data: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class MetadataLayout:
    """Where one driver's metadata files, CDI specs and container paths are."""

    driver: str
    plugin_dir: Path
    """``<kubelet plugins dir>/<driver>``: where the agent serves its kubelet socket."""
    cdi_root: Path

    def claim_dir(self, namespace: str, name: str) -> Path:
        return self.plugin_dir / HOST_SUBDIR / f"{namespace}_{name}"

    def host_file(self, namespace: str, name: str, request: str) -> Path:
        return self.claim_dir(namespace, name) / base_request(request) / HOST_FILE

    def cdi_spec_path(self, uid: str, request: str) -> Path:
        return self.cdi_root / f"{self.driver}_metadata_{uid}_{base_request(request)}.json"

    def cdi_device(self, uid: str, request: str) -> str:
        return f"{uid}_{base_request(request)}"

    def cdi_id(self, uid: str, request: str) -> str:
        return f"{self.driver}/metadata={self.cdi_device(uid, request)}"

    def container_path(self, claim: ClaimIdentity, request: str) -> str:
        file = f"{self.driver}-metadata.json"
        if claim.pod_claim_name:
            sub, key = TEMPLATES_SUBDIR, claim.pod_claim_name
        else:
            sub, key = CLAIMS_SUBDIR, claim.name
        return f"{CONTAINER_DIR}/{sub}/{key}/{base_request(request)}/{file}"


def _device_json(driver: str, device: MetadataDevice) -> dict[str, Any]:
    out: dict[str, Any] = {"driver": driver, "pool": device.pool, "name": device.name}
    if device.attributes:
        names = sorted(device.attributes)[:MAX_ATTRIBUTES]
        out["attributes"] = {k: dict(device.attributes[k]) for k in names}
    if device.network_data:
        out["networkData"] = dict(device.network_data)
    return out


def render_metadata(
    driver: str,
    claim: ClaimIdentity,
    request: str,
    devices: Sequence[MetadataDevice],
    generation: int,
) -> str:
    """The file's bytes: one ``DeviceMetadata`` per version in :data:`VERSIONS`, each on its
    own lines, newest first (the objects are identical but for ``apiVersion``)."""
    body: dict[str, Any] = {
        "metadata": {
            "name": claim.name,
            "namespace": claim.namespace,
            "uid": claim.uid,
            "generation": generation,
        }
    }
    if claim.pod_claim_name:
        body["podClaimName"] = claim.pod_claim_name
    body["requests"] = [{"name": request, "devices": [_device_json(driver, d) for d in devices]}]
    parts = [
        json.dumps({"kind": KIND, "apiVersion": f"{GROUP}/{v}", **body}, indent=2) + "\n"
        for v in VERSIONS
    ]
    return "".join(parts)


def render_cdi_spec(layout: MetadataLayout, claim: ClaimIdentity, request: str) -> str:
    """The CDI spec that bind-mounts the request's metadata file read-only."""
    spec = {
        "cdiVersion": CDI_VERSION,
        "kind": f"{layout.driver}/metadata",
        "annotations": {OWNER_ANNOTATION: claim.uid},
        "devices": [
            {
                "name": layout.cdi_device(claim.uid, request),
                "containerEdits": {
                    "mounts": [
                        {
                            "hostPath": str(layout.host_file(claim.namespace, claim.name, request)),
                            "containerPath": layout.container_path(claim, request),
                            "options": ["ro", "bind"],
                        }
                    ]
                },
            }
        ],
    }
    return json.dumps(spec, indent=1, sort_keys=True) + "\n"


def first_object(text: str) -> dict[str, Any] | None:
    """The first JSON object of a metadata stream, None when it has none or is not JSON."""
    try:
        got, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def _refused(message: str) -> Refusal:
    return Refusal("E_DEVICE_METADATA", message, retryable=True)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refused(f"read {path}: {exc.strerror}") from exc


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, content: str) -> None:
    """Temporary file beside ``path``, fsync, rename over it, fsync the directory: a reader
    (or a container mounting it) sees the old bytes or the new ones, never a part."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        with open(tmp, "w") as out:
            out.write(content)
            out.flush()
            os.fchmod(out.fileno(), 0o644)
            os.fsync(out.fileno())
        os.replace(tmp, path)
        _sync_dir(path.parent)
    except OSError as exc:
        raise _refused(f"write {path}: {exc.strerror}") from exc


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _refused(f"remove {path}: {exc.strerror}") from exc


class DeviceMetadataFiles:
    """Writes, updates and removes one driver's metadata files and their CDI specs."""

    def __init__(self, layout: MetadataLayout) -> None:
        self.layout = layout

    # --- ownership ----------------------------------------------------------------------

    def _ours(self, text: str, uid: str) -> dict[str, Any] | None:
        """The first object of a metadata file when it is this driver's for claim ``uid``."""
        got = first_object(text)
        if got is None or got.get("kind") != KIND:
            return None
        if str((got.get("metadata") or {}).get("uid", "")) != uid:
            return None
        for req in got.get("requests") or []:
            for dev in req.get("devices") or []:
                if dev.get("driver") != self.layout.driver:
                    return None
        return got

    # --- NodePrepare ----------------------------------------------------------------------

    def publish(
        self, claim: ClaimIdentity, requests: Mapping[str, Sequence[MetadataDevice]]
    ) -> dict[str, str]:
        """Write each request's file (unless ours already: a kubelet retry keeps what a
        Ready sandbox added) and its CDI spec; the CDI device id by base request name."""
        ids: dict[str, str] = {}
        for request, devices in requests.items():
            path = self.layout.host_file(claim.namespace, claim.name, request)
            existing = _read(path)
            if existing is None:
                write_atomically(
                    path, render_metadata(self.layout.driver, claim, request, devices, 1)
                )
            elif self._ours(existing, claim.uid) is None:
                raise _refused(f"{path} is not this claim's metadata (uid {claim.uid}): not ours")
            spec_path = self.layout.cdi_spec_path(claim.uid, request)
            spec = render_cdi_spec(self.layout, claim, request)
            current = _read(spec_path)
            if current is None:
                write_atomically(spec_path, spec)
            elif current != spec:
                raise _refused(f"{spec_path} exists with other content: not ours")
            ids[base_request(request)] = self.layout.cdi_id(claim.uid, request)
        return ids

    # --- RunPodSandbox Ready / sandbox removal -------------------------------------------

    def update(
        self,
        namespace: str,
        name: str,
        uid: str,
        devices: Mapping[tuple[str, str], MetadataDevice | None],
    ) -> int:
        """Rewrite (generation + 1) every request file of the claim that lists a device of
        ``devices`` (by pool and name): its ``networkData`` and grant attributes become the
        given device's (None: removed, the prepare-time attributes kept). Files that are
        not ours are left alone (logged). Returns how many files changed."""
        changed = 0
        claim_dir = self.layout.claim_dir(namespace, name)
        for path in sorted(claim_dir.glob(f"*/{HOST_FILE}")):
            text = _read(path)
            got = self._ours(text or "", uid)
            if got is None:
                log.warning("event=device-metadata-skip path=%s reason=not-ours", path)
                continue
            claim = ClaimIdentity(namespace, name, uid, got.get("podClaimName"))
            for req in got.get("requests") or []:
                listed = [_merged(dev, devices) for dev in req.get("devices") or []]
                generation = int((got.get("metadata") or {}).get("generation", 1)) + 1
                content = render_metadata(
                    self.layout.driver, claim, str(req.get("name", "")), listed, generation
                )
                if _same_devices(text or "", content):
                    continue
                write_atomically(path, content)
                changed += 1
        return changed

    # --- NodeUnprepare --------------------------------------------------------------------

    def remove(self, namespace: str, name: str, uid: str) -> None:
        """Remove the claim's CDI specs (exact bytes: ours) and metadata files (ours by uid
        and driver); anything else is left in place (logged)."""
        for spec_path in sorted(
            self.layout.cdi_root.glob(f"{self.layout.driver}_metadata_{uid}_*.json")
        ):
            text = _read(spec_path) or ""
            request = spec_path.name[len(f"{self.layout.driver}_metadata_{uid}_") : -5]
            mounts = _spec_claim(text, uid)
            if mounts is None or text != render_cdi_spec(self.layout, mounts, request):
                log.warning("event=device-metadata-skip path=%s reason=not-ours", spec_path)
                continue
            _remove(spec_path)
        claim_dir = self.layout.claim_dir(namespace, name)
        for path in sorted(claim_dir.glob(f"*/{HOST_FILE}")):
            if self._ours(_read(path) or "", uid) is None:
                log.warning("event=device-metadata-skip path=%s reason=not-ours", path)
                continue
            _remove(path)
            _rmdir(path.parent)
        _rmdir(claim_dir)


def _rmdir(path: Path) -> None:
    with contextlib.suppress(OSError):  # gone, or not empty (someone else's file stays)
        path.rmdir()


def _spec_claim(text: str, uid: str) -> ClaimIdentity | None:
    """The claim identity a metadata CDI spec of ``uid`` was rendered for (from its mount),
    so its exact bytes can be rendered again; None when it is not such a spec."""
    try:
        spec = json.loads(text)
        mount = spec["devices"][0]["containerEdits"]["mounts"][0]
        host = Path(mount["hostPath"])
        container = str(mount["containerPath"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if (spec.get("annotations") or {}).get(OWNER_ANNOTATION) != uid:
        return None
    namespace, _, name = host.parent.parent.name.partition("_")
    parts = container.split("/")
    pod_claim = parts[-3] if len(parts) >= 3 and TEMPLATES_SUBDIR in parts else None
    return ClaimIdentity(namespace, name, uid, pod_claim)


def _merged(
    dev: Mapping[str, Any], devices: Mapping[tuple[str, str], MetadataDevice | None]
) -> MetadataDevice:
    pool, name = str(dev.get("pool", "")), str(dev.get("name", ""))
    grant_names = {*GRANT_ATTRIBUTES.values(), "grantCdiDevice"}
    kept = {
        k: v
        for k, v in (dev.get("attributes") or {}).items()
        if k.rpartition("/")[2] not in grant_names
    }
    network = dev.get("networkData")
    if (pool, name) in devices:
        given = devices[(pool, name)]
        network = None
        if given is not None:
            kept.update(given.attributes)
            network = given.network_data
    return MetadataDevice(pool, name, kept, network)


def _same_devices(old: str, new: str) -> bool:
    """Whether two streams list the same requests (only the generation differs)."""
    a, b = first_object(old), first_object(new)
    return a is not None and b is not None and a.get("requests") == b.get("requests")


def grant_attributes(driver: str, data: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The claim-status ``data`` of a VFIO or RDMA grant as metadata attributes."""
    out: dict[str, dict[str, Any]] = {}
    for key, attribute in GRANT_ATTRIBUTES.items():
        value = (data or {}).get(key)
        if isinstance(value, str) and value:
            out[f"{driver}/{attribute}"] = {"string": value}
    cdi = (data or {}).get("cdiDevices")
    if isinstance(cdi, list) and cdi and isinstance(cdi[0], str):
        out[f"{driver}/grantCdiDevice"] = {"string": cdi[0]}
    return out


def from_status_entries(
    driver: str, entries: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], MetadataDevice | None]:
    """The devices of a claim's ``status.devices`` entries (a Ready sandbox's report) as
    metadata updates: network data and grant attributes by (pool, device)."""
    out: dict[tuple[str, str], MetadataDevice | None] = {}
    for entry in entries:
        pool, name = str(entry.get("pool", "")), str(entry.get("device", ""))
        out[(pool, name)] = MetadataDevice(
            pool, name, grant_attributes(driver, entry.get("data")), entry.get("networkData")
        )
    return out
