"""Render an administrator's NetworkAttachmentDefinition template for one allocated device.

A template is a reusable CNI configuration without a device in it; the shadow NAD the node
agent creates for one Pod, one claim and one allocated device carries the rendered result.
The contract :func:`render_template` keeps (issue 41):

* **Input bounds.** ``spec.config`` must be inline, nonempty and at most
  :data:`MAX_CONFIG_BYTES` UTF-8 bytes (the rendered output too), nest at most
  :data:`~dmn.api.multus.lossless_json.MAX_DEPTH` levels, be one JSON object (no null, array
  or scalar root), and have no repeated :data:`CRITICAL_KEYS` in any object.
* **Shape.** Either one plugin (root ``type``, no ``plugins``) or a conflist (``plugins``, no
  root ``type``; a root with both is ambiguous). A conflist's first entry is the one
  device-consuming plugin; every later entry's type is in :data:`METAPLUGINS`. Zero or two
  device-consuming entries, any other plugin type, and nested Multus are refused.
* **Device injection, at that entry only.** macvlan and ipvlan get ``master`` = the allocated
  parent link; host-device gets ``device`` = the allocated link, or ``pciBusID`` = the
  allocated PCI function; sriov gets ``deviceID`` = the allocated VF. A value the template
  already has for that key must be empty or equal to the allocation, and the plugin's other
  device selectors must be absent or empty (a template cannot pin another device).
* **Lossless.** Everything else is kept: unknown fields and their order, numbers as written
  (no float round trip), the whole ``ipam`` subtree including ``network_name`` and whether it
  is present. Only the root ``name`` may be added: a template without a nonempty name gets
  the source NAD's ``metadata.name``, so the logical CNI network (host-local's data
  directory, the network's identity in IPAM) is the template's, never the shadow's.
* **Frozen.** The result is compact JSON bytes and their SHA-256; the node keeps these bytes
  for the binding's whole life, whatever later happens to the template.
* **Metadata.** Nothing of the source's annotations reaches the result; in particular
  :data:`RESOURCE_NAME_ANNOTATION` never does, because Multus enters its device-plugin lookup
  when the key merely exists.

``cniVersion`` must be one of :data:`SUPPORTED_CNI_VERSIONS` (per device-consuming type).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from dmn.api.multus import lossless_json as lj
from dmn.api.multus.errors import (
    DEVICE_MISMATCH,
    TEMPLATE_INVALID,
    TEMPLATE_UNSUPPORTED,
    MultusError,
)

#: Largest ``spec.config`` accepted and produced, in UTF-8 bytes. CNI configurations are a
#: few KiB; 64 KiB keeps a shadow NAD, the node's journal record of the frozen bytes and a
#: multi-device Pod's objects far below etcd's 1.5 MiB object limit.
MAX_CONFIG_BYTES = 64 * 1024

RESOURCE_NAME_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"

#: Delegate plugins that consume the allocated device, and the key each takes it in.
DEVICE_PLUGINS = ("macvlan", "ipvlan", "host-device", "sriov")

#: Plugins allowed after the device-consuming entry of a conflist. ``tuning`` changes
#: sysctls, MTU, MAC and promiscuity of the interface the previous plugin produced and never
#: selects or creates a device, so it cannot redirect the binding to another device.
METAPLUGINS = frozenset({"tuning"})

#: Plugin types that are Multus itself: a template delegating to Multus again is refused.
NESTED_MULTUS = frozenset({"multus", "multus-shim"})
#: Keys only a Multus configuration has; their presence means nested Multus too.
MULTUS_KEYS = ("delegates", "clusterNetwork", "defaultNetworks")

_REFERENCE_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
#: CNI spec versions per device-consuming type: the containernetworking plugins (v1.x)
#: support 0.3.0–1.1.0; SR-IOV CNI up to 1.0.0. 0.1.0/0.2.0 results carry no interface list,
#: so Multus could not report the attachment.
SUPPORTED_CNI_VERSIONS: Mapping[str, tuple[str, ...]] = {
    "macvlan": _REFERENCE_VERSIONS,
    "ipvlan": _REFERENCE_VERSIONS,
    "host-device": _REFERENCE_VERSIONS,
    "sriov": ("0.3.0", "0.3.1", "0.4.0", "1.0.0"),
}

#: Keys whose repetition in any object of the configuration is refused: a Go decoder keeps
#: the last, a reviewer reads the first, and the device or network identity would be
#: ambiguous. Other repeated keys are kept as written.
CRITICAL_KEYS = frozenset(
    {
        "type",
        "name",
        "cniVersion",
        "plugins",
        "master",
        "device",
        "deviceID",
        "pciBusID",
        "hwaddr",
        "kernelpath",
        "ipam",
        "network_name",
        "range",
        "ranges",
        "node_slice_size",
        "linkInContainer",
        "delegates",
    }
)

#: Per device-consuming type: the keys that select a host device (the first is the one the
#: allocation is written to for a link, the PCI key for a PCI function).
_SELECTORS: Mapping[str, tuple[str, ...]] = {
    "macvlan": ("master",),
    "ipvlan": ("master",),
    "host-device": ("device", "pciBusID", "hwaddr", "kernelpath"),
    "sriov": ("deviceID", "pciBusID"),
}

_CNI_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")
_PCI = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class TemplateRef:
    """A NetworkAttachmentDefinition reference after namespace resolution."""

    namespace: str
    name: str


@dataclass(frozen=True)
class SourceTemplate:
    """The template NAD as the node agent read it from the API."""

    namespace: str
    name: str
    uid: str
    annotations: Mapping[str, str]
    config: str


@dataclass(frozen=True)
class AllocatedDevice:
    """The allocated device, from the node's trusted discovery (never from user config).

    ``ifname`` is the host link DRA allocated (host-device) or the parent link (macvlan and
    ipvlan ``master``); ``pci_address`` the plain BDF (``0000:03:00.1``) of the function.
    """

    kind: Literal["link", "pci"]
    ifname: str | None
    pci_address: str | None


@dataclass(frozen=True)
class RenderedTemplate:
    """The frozen CNI configuration of one shadow NAD."""

    source: TemplateRef
    source_uid: str
    config: bytes
    digest: str
    cni_name: str
    delegate_type: str


def _fail(reason: str, path: str, message: str) -> MultusError:
    return MultusError(reason, path, message)


def valid_ifname(name: str) -> bool:
    """A Linux interface name: 1–15 bytes, no ``/``, ``:``, whitespace, not ``.``/``..``."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return (
        0 < size <= 15
        and name not in (".", "..")
        and not any(c in "/:" or c.isspace() or ord(c) < 0x21 for c in name)
    )


def valid_dns_label(text: str) -> bool:
    return len(text) <= 63 and _DNS_LABEL.fullmatch(text) is not None


def valid_dns_subdomain(text: str) -> bool:
    return len(text) <= 253 and _DNS_SUBDOMAIN.fullmatch(text) is not None


def _check_device(device: AllocatedDevice) -> None:
    if device.kind not in ("link", "pci"):
        raise _fail(DEVICE_MISMATCH, "device.kind", f"unknown device kind {device.kind!r}")
    if device.ifname is not None and not valid_ifname(device.ifname):
        raise _fail(DEVICE_MISMATCH, "device.ifname", f"{device.ifname!r} is no interface name")
    if device.pci_address is not None and _PCI.fullmatch(device.pci_address) is None:
        raise _fail(
            DEVICE_MISMATCH,
            "device.pci_address",
            f"{device.pci_address!r} is not a plain lowercase PCI address like 0000:03:00.1",
        )
    if device.kind == "link" and device.ifname is None:
        raise _fail(DEVICE_MISMATCH, "device.ifname", "a link allocation needs its interface")
    if device.kind == "pci" and device.pci_address is None:
        raise _fail(DEVICE_MISMATCH, "device.pci_address", "a PCI allocation needs its address")


def _walk_critical(value: lj.Value, path: str) -> None:
    """Refuse a repeated critical key in any object below ``value``."""
    stack: list[tuple[lj.Value, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, lj.Object):
            seen: set[str] = set()
            for key, item in node.members:
                if key in seen and key in CRITICAL_KEYS:
                    raise _fail(TEMPLATE_INVALID, f"{where}.{key}", f"key {key!r} is repeated")
                seen.add(key)
                stack.append((item, f"{where}.{key}"))
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(node))


def _string_field(obj: lj.Object, key: str, path: str, *, required: bool) -> str | None:
    if not obj.has(key):
        if required:
            raise _fail(TEMPLATE_INVALID, f"{path}.{key}", f"{key!r} is missing")
        return None
    value = obj.get(key)
    if not isinstance(value, str):
        raise _fail(TEMPLATE_INVALID, f"{path}.{key}", f"{key!r} must be a string")
    return value


def _plugin_type(obj: lj.Object, path: str) -> str:
    kind = _string_field(obj, "type", path, required=True)
    assert kind is not None
    if not kind:
        raise _fail(TEMPLATE_INVALID, f"{path}.type", "'type' is empty")
    if kind in NESTED_MULTUS:
        raise _fail(TEMPLATE_UNSUPPORTED, f"{path}.type", "nested Multus is not supported")
    for key in MULTUS_KEYS:
        if obj.has(key):
            raise _fail(
                TEMPLATE_UNSUPPORTED,
                f"{path}.{key}",
                f"{key!r} is a Multus configuration key: nested Multus is not supported",
            )
    return kind


def _check_ipam(obj: lj.Object, path: str) -> None:
    if not obj.has("ipam"):
        return
    ipam = obj.get("ipam")
    if not isinstance(ipam, lj.Object):
        raise _fail(TEMPLATE_INVALID, f"{path}.ipam", "'ipam' must be an object")
    _string_field(ipam, "type", f"{path}.ipam", required=True)
    if ipam.has("network_name"):
        _string_field(ipam, "network_name", f"{path}.ipam", required=False)
    if ipam.get("node_slice_size") not in (None, ""):
        raise _fail(
            TEMPLATE_UNSUPPORTED,
            f"{path}.ipam.node_slice_size",
            "Whereabouts node-slice mode is not supported for shadow networks",
        )


def _inject(entry: lj.Object, kind: str, device: AllocatedDevice, path: str) -> None:
    """Write the allocation into the device-consuming ``entry`` (of plugin type ``kind``)."""
    if kind in ("macvlan", "ipvlan"):
        if device.ifname is None or device.kind != "link":
            raise _fail(DEVICE_MISMATCH, f"{path}.type", f"{kind} needs an allocated parent link")
        if entry.get("linkInContainer") not in (None, False):
            raise _fail(
                TEMPLATE_UNSUPPORTED,
                f"{path}.linkInContainer",
                "the allocated parent is a host link; linkInContainer is not supported",
            )
        key, value = "master", device.ifname
    elif kind == "host-device":
        if device.kind == "link":
            assert device.ifname is not None
            key, value = "device", device.ifname
        else:
            assert device.pci_address is not None
            key, value = "pciBusID", device.pci_address
    else:
        if device.pci_address is None:
            raise _fail(DEVICE_MISMATCH, f"{path}.type", "sriov needs an allocated PCI function")
        key, value = "deviceID", device.pci_address
    pci_key = key in ("deviceID", "pciBusID")
    for selector in _SELECTORS[kind]:
        if not entry.has(selector):
            continue
        present = entry.get(selector)
        if not isinstance(present, str):
            raise _fail(TEMPLATE_INVALID, f"{path}.{selector}", f"{selector!r} must be a string")
        if not present:
            continue
        names_allocation = selector == key or (pci_key and selector in ("deviceID", "pciBusID"))
        same = (present.lower() if pci_key else present) == value
        if not names_allocation:
            raise _fail(
                DEVICE_MISMATCH,
                f"{path}.{selector}",
                f"the template selects a device by {selector!r}; the allocation is {value!r}",
            )
        if not same:
            raise _fail(
                DEVICE_MISMATCH,
                f"{path}.{selector}",
                f"the template names {present!r}, the allocation is {value!r}",
            )
    entry.set(key, value, after="type")
    if pci_key and entry.has("pciBusID"):
        entry.set("pciBusID", value)


def _check_version(root: lj.Object, kind: str) -> str:
    version = _string_field(root, "cniVersion", "spec.config", required=True)
    assert version is not None
    supported = SUPPORTED_CNI_VERSIONS[kind]
    if version not in supported:
        raise _fail(
            TEMPLATE_UNSUPPORTED,
            "spec.config.cniVersion",
            f"cniVersion {version!r} is not supported for {kind} (supported: "
            f"{', '.join(supported)})",
        )
    return version


def _materialize_name(root: lj.Object, source: SourceTemplate) -> str:
    name = _string_field(root, "name", "spec.config", required=False)
    if name:
        if _CNI_NAME.fullmatch(name) is None:
            raise _fail(TEMPLATE_INVALID, "spec.config.name", f"{name!r} is no valid CNI name")
        return name
    if not valid_dns_subdomain(source.name):
        raise _fail(TEMPLATE_INVALID, "metadata.name", f"{source.name!r} is no valid NAD name")
    root.set("name", source.name, after="cniVersion")
    return source.name


def _parse_root(config: str) -> lj.Object:
    if not config.strip():
        raise _fail(
            TEMPLATE_UNSUPPORTED,
            "spec.config",
            "the template has no inline configuration (file-backed or empty NADs are "
            "not supported)",
        )
    try:
        size = len(config.encode("utf-8"))
    except UnicodeEncodeError:
        raise _fail(TEMPLATE_INVALID, "spec.config", "not valid UTF-8 text") from None
    if size > MAX_CONFIG_BYTES:
        raise _fail(TEMPLATE_INVALID, "spec.config", f"{size} bytes, more than {MAX_CONFIG_BYTES}")
    try:
        root = lj.parse(config)
    except lj.JsonError as exc:
        raise _fail(TEMPLATE_INVALID, "spec.config" + exc.path, exc.message) from None
    if not isinstance(root, lj.Object):
        what = "null" if root is None else "an array" if isinstance(root, list) else "a scalar"
        raise _fail(TEMPLATE_INVALID, "spec.config", f"the root is {what}, not an object")
    _walk_critical(root, "spec.config")
    return root


def _device_entry(root: lj.Object) -> tuple[lj.Object, str, str]:
    """The device-consuming object, its plugin type and its path; shape checks on the way."""
    has_type, has_plugins = root.has("type"), root.has("plugins")
    if has_type and has_plugins:
        raise _fail(
            TEMPLATE_INVALID,
            "spec.config",
            "the root has both 'type' and 'plugins': single plugin or list is ambiguous",
        )
    if has_type:
        kind = _plugin_type(root, "spec.config")
        if kind not in DEVICE_PLUGINS:
            raise _fail(
                TEMPLATE_UNSUPPORTED,
                "spec.config.type",
                f"plugin type {kind!r} is not a supported device plugin "
                f"({', '.join(DEVICE_PLUGINS)})",
            )
        _check_ipam(root, "spec.config")
        return root, kind, "spec.config"
    if not has_plugins:
        raise _fail(TEMPLATE_INVALID, "spec.config", "neither 'type' nor 'plugins' is present")
    for key in MULTUS_KEYS:
        if root.has(key):
            raise _fail(
                TEMPLATE_UNSUPPORTED,
                f"spec.config.{key}",
                f"{key!r} is a Multus configuration key: nested Multus is not supported",
            )
    plugins = root.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        raise _fail(TEMPLATE_INVALID, "spec.config.plugins", "must be a nonempty array")
    kinds: list[str] = []
    for i, entry in enumerate(plugins):
        path = f"spec.config.plugins[{i}]"
        if not isinstance(entry, lj.Object):
            raise _fail(TEMPLATE_INVALID, path, "each plugin must be an object")
        kinds.append(_plugin_type(entry, path))
        _check_ipam(entry, path)
    consuming = [i for i, kind in enumerate(kinds) if kind in DEVICE_PLUGINS]
    if not consuming:
        raise _fail(
            TEMPLATE_UNSUPPORTED,
            "spec.config.plugins",
            f"no device-consuming plugin ({', '.join(DEVICE_PLUGINS)}) in the list",
        )
    if len(consuming) > 1:
        raise _fail(
            TEMPLATE_UNSUPPORTED,
            f"spec.config.plugins[{consuming[1]}].type",
            "a second device-consuming plugin: one template binds exactly one device",
        )
    if consuming[0] != 0:
        raise _fail(
            TEMPLATE_UNSUPPORTED,
            f"spec.config.plugins[{consuming[0]}].type",
            "the device-consuming plugin must be the first entry",
        )
    for i, kind in enumerate(kinds[1:], start=1):
        if kind not in METAPLUGINS:
            raise _fail(
                TEMPLATE_UNSUPPORTED,
                f"spec.config.plugins[{i}].type",
                f"plugin {kind!r} may not follow the device plugin (allowed: "
                f"{', '.join(sorted(METAPLUGINS))})",
            )
    first = plugins[0]
    assert isinstance(first, lj.Object)
    return first, kinds[0], "spec.config.plugins[0]"


def render_template(source: SourceTemplate, device: AllocatedDevice) -> RenderedTemplate:
    """The shadow's frozen configuration: ``source``'s template bound to ``device``.

    Raises :class:`MultusError` (and nothing else) for every refusal listed in the module
    docstring; the source object is never modified.
    """
    _check_device(device)
    root = _parse_root(source.config)
    entry, kind, path = _device_entry(root)
    _check_version(root, kind)
    cni_name = _materialize_name(root, source)
    _inject(entry, kind, device, path)
    config = lj.dumps(root).encode("utf-8")
    if len(config) > MAX_CONFIG_BYTES:
        raise _fail(
            TEMPLATE_INVALID,
            "spec.config",
            f"the rendered configuration has {len(config)} bytes, more than {MAX_CONFIG_BYTES}",
        )
    return RenderedTemplate(
        source=TemplateRef(source.namespace, source.name),
        source_uid=source.uid,
        config=config,
        digest=hashlib.sha256(config).hexdigest(),
        cni_name=cni_name,
        delegate_type=kind,
    )
