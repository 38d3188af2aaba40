"""Template rendering: shape rules, device injection, lossless copy, bounds, reason codes."""

from __future__ import annotations

import hashlib
import json

import pytest

from dmn.api.multus import errors
from dmn.api.multus.errors import MultusError
from dmn.api.multus.lossless_json import MAX_DEPTH
from dmn.api.multus.template import (
    MAX_CONFIG_BYTES,
    METAPLUGINS,
    RESOURCE_NAME_ANNOTATION,
    AllocatedDevice,
    RenderedTemplate,
    SourceTemplate,
    TemplateRef,
    render_template,
)

LINK = AllocatedDevice("link", "eth1", None)
VF_LINK = AllocatedDevice("link", "ens1f0v3", "0000:03:00.3")
PCI = AllocatedDevice("pci", None, "0000:03:00.1")


def source(config: str | dict, name: str = "rail-a", annotations=None) -> SourceTemplate:  # type: ignore[no-untyped-def, type-arg]
    text = config if isinstance(config, str) else json.dumps(config)
    return SourceTemplate("infra", name, "uid-1", annotations or {}, text)


def render(config: str | dict, device: AllocatedDevice = LINK, **kw) -> RenderedTemplate:  # type: ignore[no-untyped-def, type-arg]
    return render_template(source(config, **kw), device)


def loaded(rendered: RenderedTemplate) -> dict:  # type: ignore[type-arg]
    return json.loads(rendered.config)  # type: ignore[no-any-return]


def refused(config: str | dict, device: AllocatedDevice = LINK, **kw) -> MultusError:  # type: ignore[no-untyped-def, type-arg]
    with pytest.raises(MultusError) as info:
        render(config, device, **kw)
    assert info.value.reason in errors.REASONS
    return info.value


MACVLAN = {
    "cniVersion": "1.0.0",
    "name": "rail-a-net",
    "type": "macvlan",
    "mode": "bridge",
    "ipam": {"type": "whereabouts", "range": "192.0.2.0/24", "network_name": "rail-a"},
}


# ---- shape


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("null", "null"),
        ("[]", "an array"),
        ("[{}]", "an array"),
        ("7", "a scalar"),
        ('"x"', "a scalar"),
    ],
)
def test_non_object_roots_are_invalid(text: str, what: str) -> None:
    e = refused(text)
    assert (e.reason, e.field) == (errors.TEMPLATE_INVALID, "spec.config")
    assert what in e.message


@pytest.mark.parametrize("text", ["{", '{"type": "macvlan",}', "{'a': 1}", '{"a": NaN}', "{} {}"])
def test_malformed_json_is_invalid(text: str) -> None:
    assert refused(text).reason == errors.TEMPLATE_INVALID


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_inline_config_is_unsupported(text: str) -> None:
    assert refused(text).reason == errors.TEMPLATE_UNSUPPORTED


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"cniVersion":"1.0.0","type":"macvlan","type":"sriov"}', "spec.config.type"),
        ('{"cniVersion":"1.0.0","name":"a","name":"b","type":"macvlan"}', "spec.config.name"),
        ('{"cniVersion":"1.0.0","cniVersion":"0.4.0","type":"macvlan"}', "spec.config.cniVersion"),
        (
            '{"cniVersion":"1.0.0","type":"macvlan","master":"","master":"eth9"}',
            "spec.config.master",
        ),
        (
            '{"cniVersion":"1.0.0","plugins":[{"type":"sriov","deviceID":"","deviceID":"x"}]}',
            "spec.config.plugins[0].deviceID",
        ),
        (
            '{"cniVersion":"1.0.0","type":"macvlan","ipam":{"type":"whereabouts",'
            '"network_name":"a","network_name":"b"}}',
            "spec.config.ipam.network_name",
        ),
        ('{"cniVersion":"1.0.0","type":"macvlan","ipam":{},"ipam":{}}', "spec.config.ipam"),
        ('{"cniVersion":"1.0.0","plugins":[],"plugins":[]}', "spec.config.plugins"),
    ],
)
def test_repeated_critical_keys_are_invalid_at_their_path(text: str, field: str) -> None:
    e = refused(text)
    assert (e.reason, e.field) == (errors.TEMPLATE_INVALID, field)


def test_repeated_non_critical_keys_are_kept_as_written() -> None:
    text = '{"cniVersion":"1.0.0","type":"macvlan","x":1,"x":2}'
    assert (
        render(text).config
        == b'{"cniVersion":"1.0.0","name":"rail-a","type":"macvlan","master":"eth1","x":1,"x":2}'
    )


def test_type_and_plugins_at_the_root_are_ambiguous() -> None:
    e = refused({"cniVersion": "1.0.0", "type": "macvlan", "plugins": [{"type": "macvlan"}]})
    assert (e.reason, e.field) == (errors.TEMPLATE_INVALID, "spec.config")
    e = refused({"cniVersion": "1.0.0", "type": "", "plugins": [{"type": "macvlan"}]})
    assert e.reason == errors.TEMPLATE_INVALID


def test_neither_type_nor_plugins_is_invalid() -> None:
    assert refused({"cniVersion": "1.0.0", "name": "x"}).reason == errors.TEMPLATE_INVALID


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"cniVersion": "1.0.0", "type": 3}, "spec.config.type"),
        ({"cniVersion": "1.0.0", "type": ""}, "spec.config.type"),
        ({"cniVersion": 1, "type": "macvlan"}, "spec.config.cniVersion"),
        ({"type": "macvlan"}, "spec.config.cniVersion"),
        ({"cniVersion": "1.0.0", "name": 5, "type": "macvlan"}, "spec.config.name"),
        ({"cniVersion": "1.0.0", "name": "bad name", "type": "macvlan"}, "spec.config.name"),
        ({"cniVersion": "1.0.0", "type": "macvlan", "master": 5}, "spec.config.master"),
        ({"cniVersion": "1.0.0", "type": "macvlan", "ipam": []}, "spec.config.ipam"),
        ({"cniVersion": "1.0.0", "type": "macvlan", "ipam": {}}, "spec.config.ipam.type"),
        (
            {"cniVersion": "1.0.0", "type": "macvlan", "ipam": {"type": "x", "network_name": 1}},
            "spec.config.ipam.network_name",
        ),
        ({"cniVersion": "1.0.0", "plugins": {}}, "spec.config.plugins"),
        ({"cniVersion": "1.0.0", "plugins": []}, "spec.config.plugins"),
        ({"cniVersion": "1.0.0", "plugins": [None]}, "spec.config.plugins[0]"),
        ({"cniVersion": "1.0.0", "plugins": [{"type": "macvlan"}, 3]}, "spec.config.plugins[1]"),
        ({"cniVersion": "1.0.0", "plugins": [{"mode": "bridge"}]}, "spec.config.plugins[0].type"),
    ],
)
def test_missing_or_mistyped_fields_are_invalid(config: dict, field: str) -> None:  # type: ignore[type-arg]
    e = refused(config)
    assert (e.reason, e.field) == (errors.TEMPLATE_INVALID, field)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"cniVersion": "1.0.0", "type": "bridge"}, "spec.config.type"),
        ({"cniVersion": "1.0.0", "type": "tuning"}, "spec.config.type"),
        ({"cniVersion": "1.0.0", "plugins": [{"type": "tuning"}]}, "spec.config.plugins"),
        (
            {"cniVersion": "1.0.0", "plugins": [{"type": "macvlan"}, {"type": "sriov"}]},
            "spec.config.plugins[1].type",
        ),
        (
            {"cniVersion": "1.0.0", "plugins": [{"type": "sriov"}, {"type": "sriov"}]},
            "spec.config.plugins[1].type",
        ),
        (
            {"cniVersion": "1.0.0", "plugins": [{"type": "tuning"}, {"type": "macvlan"}]},
            "spec.config.plugins[1].type",
        ),
        (
            {"cniVersion": "1.0.0", "plugins": [{"type": "macvlan"}, {"type": "portmap"}]},
            "spec.config.plugins[1].type",
        ),
        (
            {"cniVersion": "1.0.0", "plugins": [{"type": "macvlan"}, {"type": "bandwidth"}]},
            "spec.config.plugins[1].type",
        ),
    ],
)
def test_unsupported_plugin_graphs(config: dict, field: str) -> None:  # type: ignore[type-arg]
    e = refused(config)
    assert (e.reason, e.field) == (errors.TEMPLATE_UNSUPPORTED, field)


@pytest.mark.parametrize(
    "config",
    [
        {"cniVersion": "1.0.0", "type": "multus", "delegates": [MACVLAN]},
        {"cniVersion": "1.0.0", "type": "multus-shim"},
        {"cniVersion": "1.0.0", "plugins": [{"type": "multus", "delegates": [MACVLAN]}]},
        {"cniVersion": "1.0.0", "type": "macvlan", "delegates": [MACVLAN]},
        {"cniVersion": "1.0.0", "plugins": [{"type": "macvlan"}], "clusterNetwork": "x"},
        {"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "defaultNetworks": []}]},
    ],
)
def test_nested_multus_is_unsupported(config: dict) -> None:  # type: ignore[type-arg]
    e = refused(config)
    assert e.reason == errors.TEMPLATE_UNSUPPORTED
    assert "Multus" in e.message


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "2.0.0", "1.0", ""])
def test_unsupported_cni_versions(version: str) -> None:
    e = refused({**MACVLAN, "cniVersion": version})
    assert (e.reason, e.field) == (errors.TEMPLATE_UNSUPPORTED, "spec.config.cniVersion")


def test_sriov_does_not_take_cni_1_1_but_the_reference_plugins_do() -> None:
    render({**MACVLAN, "cniVersion": "1.1.0"})
    e = refused({"cniVersion": "1.1.0", "type": "sriov"}, PCI)
    assert e.reason == errors.TEMPLATE_UNSUPPORTED


def test_whereabouts_node_slices_are_unsupported() -> None:
    ipam = {"type": "whereabouts", "range": "192.0.2.0/24", "node_slice_size": "/28"}
    e = refused({**MACVLAN, "ipam": ipam})
    assert (e.reason, e.field) == (errors.TEMPLATE_UNSUPPORTED, "spec.config.ipam.node_slice_size")


def test_link_in_container_is_unsupported() -> None:
    e = refused({**MACVLAN, "linkInContainer": True})
    assert (e.reason, e.field) == (errors.TEMPLATE_UNSUPPORTED, "spec.config.linkInContainer")
    render({**MACVLAN, "linkInContainer": False})


# ---- bounds


def test_size_limit_is_64_kib_of_utf8() -> None:
    pad = "x" * (MAX_CONFIG_BYTES - 200)
    render({**MACVLAN, "pad": pad})
    e = refused({**MACVLAN, "pad": pad + "x" * 300})
    assert (e.reason, e.field) == (errors.TEMPLATE_INVALID, "spec.config")
    assert str(MAX_CONFIG_BYTES) in e.message
    e = refused({**MACVLAN, "pad": "é" * (MAX_CONFIG_BYTES // 2)})  # 2 bytes each
    assert e.reason == errors.TEMPLATE_INVALID


def test_nesting_limit() -> None:
    def nested(depth: int) -> str:
        return '{"cniVersion":"1.0.0","type":"macvlan","x":' + "[" * depth + "]" * depth + "}"

    render(nested(MAX_DEPTH - 1))
    e = refused(nested(MAX_DEPTH))
    assert e.reason == errors.TEMPLATE_INVALID and "nested" in e.message
    assert refused(nested(100_000)).reason == errors.TEMPLATE_INVALID


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = '{"cniVersion":"1.0.0","type":"macvlan","x":"' + "[{" * 5000 + '\\""}'
    assert render(text).config.endswith(b'"x":"' + b"[{" * 5000 + b'\\""}')


def test_invalid_utf8_surrogates_are_invalid() -> None:
    assert refused('{"cniVersion":"1.0.0","type":"macvlan","x":"\ud800"}').reason == (
        errors.TEMPLATE_INVALID
    )


# ---- lossless copy


def test_numbers_keep_their_exact_text() -> None:
    big = "123456789012345678901234567890123456789"
    text = (
        '{"cniVersion":"1.0.0","type":"macvlan","mtu":9000,"big":'
        + big
        + ',"neg":-18446744073709551617,'
        '"dec":0.10000000000000000555,"exp":1e400,"tiny":5E-324,"zero":-0.0}'
    )
    out = render(text).config.decode()
    for piece in (
        big,
        "-18446744073709551617",
        "0.10000000000000000555",
        "1e400",
        "5E-324",
        "-0.0",
    ):
        assert piece in out


def test_an_integer_of_fifty_thousand_digits_is_kept_digit_for_digit() -> None:
    digits = "9" * 50_000  # far past Python's 4300-digit int() conversion limit
    text = '{"cniVersion":"1.0.0","type":"macvlan","n":' + digits + "}"
    assert render(text).config.endswith(b'"n":' + digits.encode() + b"}")


def test_unknown_fields_keep_their_order_and_values() -> None:
    text = (
        '{"zeta":{"b":1,"a":[true,false,null]},"cniVersion":"1.0.0","type":"macvlan",'
        '"capabilities":{"ips":true},"vlan":5,"spoofchk":"on","alpha":"é\\u2028"}'
    )
    out = render(text).config.decode()
    assert out == (
        '{"zeta":{"b":1,"a":[true,false,null]},"cniVersion":"1.0.0","name":"rail-a",'
        '"type":"macvlan","master":"eth1","capabilities":{"ips":true},"vlan":5,'
        '"spoofchk":"on","alpha":"é\u2028"}'
    )


def test_ipam_subtree_is_copied_exactly_including_network_name_and_omissions() -> None:
    ipam = (
        '{"type":"whereabouts","range":"192.0.2.0/24","network_name":"","routes":[],'
        '"exclude":["192.0.2.1/32"],"kubernetes":{"kubeconfig":"/etc/cni/wb.kubeconfig"},'
        '"leader_lease_duration":1500}'
    )
    text = '{"cniVersion":"0.4.0","name":"n","plugins":[{"type":"macvlan","ipam":' + ipam + "}]}"
    out = render(text).config.decode()
    assert '"ipam":' + ipam in out
    no_name = '{"type":"host-local","subnet":"10.1.0.0/24"}'
    out = render('{"cniVersion":"0.4.0","type":"macvlan","ipam":' + no_name + "}").config.decode()
    assert '"ipam":' + no_name in out and "network_name" not in out


def test_source_is_not_modified_and_annotations_never_reach_the_result() -> None:
    src = source(MACVLAN, annotations={RESOURCE_NAME_ANNOTATION: "", "team": "x"})
    before = src.config
    rendered = render_template(src, LINK)
    assert src.config == before
    assert not hasattr(rendered, "annotations")
    assert b"resourceName" not in rendered.config and b"team" not in rendered.config


# ---- name materialisation


def test_a_nonempty_cni_name_is_kept() -> None:
    rendered = render(MACVLAN)
    assert rendered.cni_name == "rail-a-net" and loaded(rendered)["name"] == "rail-a-net"


@pytest.mark.parametrize(
    "config",
    [
        {"cniVersion": "1.0.0", "type": "macvlan"},
        {"cniVersion": "1.0.0", "name": "", "type": "macvlan"},
    ],
)
def test_a_missing_or_empty_name_becomes_the_source_nad_name(config: dict) -> None:  # type: ignore[type-arg]
    rendered = render(config, name="rail-b.v2")
    assert rendered.cni_name == "rail-b.v2"
    assert rendered.config.startswith(b'{"cniVersion":"1.0.0","name":"rail-b.v2",')
    assert rendered.source == TemplateRef("infra", "rail-b.v2") and rendered.source_uid == "uid-1"


def test_the_conflist_name_is_the_root_name() -> None:
    config = {"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "name": "inner"}]}
    out = loaded(render(config))
    assert out["name"] == "rail-a" and out["plugins"][0]["name"] == "inner"


# ---- device injection


def test_macvlan_and_ipvlan_get_the_parent_as_master() -> None:
    for kind in ("macvlan", "ipvlan"):
        rendered = render({"cniVersion": "1.0.0", "type": kind, "mode": "l2"})
        assert loaded(rendered)["master"] == "eth1" and rendered.delegate_type == kind


def test_host_device_gets_the_link_or_the_pci_function() -> None:
    config = {"cniVersion": "1.0.0", "type": "host-device"}
    assert loaded(render(config, LINK))["device"] == "eth1"
    out = loaded(render(config, PCI))
    assert out["pciBusID"] == "0000:03:00.1" and "device" not in out


def test_sriov_gets_the_vf_as_device_id_only_at_its_entry() -> None:
    config = {
        "cniVersion": "1.0.0",
        "name": "ai-rail-a",
        "plugins": [
            {
                "type": "sriov",
                "vlan": 100,
                "ipam": {"type": "whereabouts", "range": "192.0.2.0/24"},
            },
            {"type": "tuning", "mtu": 9000},
        ],
    }
    for device in (PCI, AllocatedDevice("link", "ens1f0v3", "0000:03:00.1")):
        out = loaded(render(config, device))
        assert out["plugins"][0]["deviceID"] == "0000:03:00.1"
        assert out["plugins"][1] == {"type": "tuning", "mtu": 9000}
        assert "deviceID" not in out and "pciBusID" not in out["plugins"][0]


def test_sriov_keeps_an_equal_pci_bus_id_normalised() -> None:
    config = {"cniVersion": "1.0.0", "type": "sriov", "pciBusID": "0000:03:00.1", "deviceID": ""}
    out = loaded(render(config, PCI))
    assert out["deviceID"] == out["pciBusID"] == "0000:03:00.1"
    out = loaded(render({"cniVersion": "1.0.0", "type": "sriov", "deviceID": "0000:03:00.1"}, PCI))
    assert out["deviceID"] == "0000:03:00.1"


def test_an_equal_or_empty_preexisting_device_is_accepted() -> None:
    assert loaded(render({**MACVLAN, "master": "eth1"}))["master"] == "eth1"
    assert loaded(render({**MACVLAN, "master": ""}))["master"] == "eth1"
    host = {"cniVersion": "1.0.0", "type": "host-device", "pciBusID": "0000:03:00.1", "device": ""}
    assert loaded(render(host, PCI))["pciBusID"] == "0000:03:00.1"


@pytest.mark.parametrize(
    ("config", "device", "field"),
    [
        ({**MACVLAN, "master": "eth9"}, LINK, "spec.config.master"),
        ({"cniVersion": "1.0.0", "type": "ipvlan", "master": "eth9"}, LINK, "spec.config.master"),
        (
            {"cniVersion": "1.0.0", "type": "host-device", "device": "eth9"},
            LINK,
            "spec.config.device",
        ),
        (
            {"cniVersion": "1.0.0", "type": "host-device", "hwaddr": "02:00:00:00:00:01"},
            LINK,
            "spec.config.hwaddr",
        ),
        (
            {"cniVersion": "1.0.0", "type": "host-device", "kernelpath": "/sys/x"},
            LINK,
            "spec.config.kernelpath",
        ),
        (
            {"cniVersion": "1.0.0", "type": "host-device", "pciBusID": "0000:03:00.1"},
            LINK,
            "spec.config.pciBusID",
        ),
        (
            {"cniVersion": "1.0.0", "type": "host-device", "device": "eth1"},
            PCI,
            "spec.config.device",
        ),
        (
            {"cniVersion": "1.0.0", "type": "host-device", "pciBusID": "0000:04:00.1"},
            PCI,
            "spec.config.pciBusID",
        ),
        (
            {"cniVersion": "1.0.0", "type": "sriov", "deviceID": "0000:03:00.2"},
            PCI,
            "spec.config.deviceID",
        ),
        (
            {"cniVersion": "1.0.0", "type": "sriov", "pciBusID": "0000:03:00.2"},
            PCI,
            "spec.config.pciBusID",
        ),
        (
            {
                "cniVersion": "1.0.0",
                "plugins": [{"type": "sriov", "deviceID": "0000:09:00.0"}, {"type": "tuning"}],
            },
            PCI,
            "spec.config.plugins[0].deviceID",
        ),
        ({**MACVLAN}, PCI, "spec.config.type"),
        ({"cniVersion": "1.0.0", "type": "sriov"}, LINK, "spec.config.type"),
    ],
)
def test_a_template_pinning_another_device_or_an_unfit_device_is_a_mismatch(
    config: dict,  # type: ignore[type-arg]
    device: AllocatedDevice,
    field: str,
) -> None:
    e = refused(config, device)
    assert (e.reason, e.field) == (errors.DEVICE_MISMATCH, field)


@pytest.mark.parametrize(
    ("device", "field"),
    [
        (AllocatedDevice("link", None, None), "device.ifname"),
        (AllocatedDevice("pci", None, None), "device.pci_address"),
        (AllocatedDevice("link", "a/b", None), "device.ifname"),
        (AllocatedDevice("link", "x" * 16, None), "device.ifname"),
        (AllocatedDevice("pci", None, "pci:0000:03:00.1"), "device.pci_address"),
        (AllocatedDevice("pci", None, "0000:03:00.9"), "device.pci_address"),
        (AllocatedDevice("pci", None, "0000:03:00.1\n"), "device.pci_address"),
        (AllocatedDevice("usb", None, None), "device.kind"),  # type: ignore[arg-type]
    ],
)
def test_an_invalid_allocation_is_refused(device: AllocatedDevice, field: str) -> None:
    e = refused(MACVLAN, device)
    assert (e.reason, e.field) == (errors.DEVICE_MISMATCH, field)


def test_tuning_is_the_only_metaplugin_and_receives_no_device() -> None:
    assert frozenset({"tuning"}) == METAPLUGINS
    config = {
        "cniVersion": "1.0.0",
        "plugins": [
            {"type": "macvlan"},
            {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}},
            {"type": "tuning", "mac": "02:00:00:00:00:09"},
        ],
    }
    out = loaded(render(config))
    assert out["plugins"][0]["master"] == "eth1"
    assert all("master" not in p and "deviceID" not in p for p in out["plugins"][1:])


# ---- frozen result


def test_result_is_bytes_with_their_sha256_and_deterministic() -> None:
    a, b = render(MACVLAN), render(MACVLAN)
    assert isinstance(a.config, bytes) and a == b
    assert a.digest == hashlib.sha256(a.config).hexdigest()
    assert render(json.dumps(MACVLAN, indent=4)).config == a.config


def test_rendering_a_rendered_config_again_changes_nothing() -> None:
    first = render({"cniVersion": "1.0.0", "plugins": [{"type": "sriov"}, {"type": "tuning"}]}, PCI)
    again = render(first.config.decode(), PCI)
    assert again.config == first.config


def test_every_core_reason_is_registered() -> None:
    from dmn.reason_codes import lookup

    assert all(lookup(code) is not None for code in errors.REASONS)
