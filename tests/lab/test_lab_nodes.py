"""The further lab nodes' names, addresses and files stay apart (pure: no lab started)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from dmn.api.identity import DRIVER
from dmn.lab.upstream import configs
from dmn.lab.upstream.driver import LAB_LINKS
from dmn.lab.upstream.lab_nodes import FABRIC_BRIDGE, MAX_INDEX, LabNode
from tests.lab.support import dmn_lab, no_traceback

#: ``sun_path`` is 108 bytes with its terminating NUL
SOCKADDR_UN_PATH_MAX = 107
NODES = [LabNode(i) for i in range(1, MAX_INDEX + 1)]
#: the shape of the e2e tests' lab directory (``tempfile.mkdtemp(prefix="dmn-e2e-")``)
E2E_ROOT = Path("/tmp/dmn-e2e-abcdefgh/up")


def test_index_bounds() -> None:
    for bad in (0, MAX_INDEX + 1, -1):
        with pytest.raises(ValueError):
            LabNode(bad)


def test_names_links_addresses_and_cgroups_are_distinct_and_fit_the_kernel() -> None:
    names = {n.name for n in NODES} | {configs.NODE_NAME}
    assert len(names) == MAX_INDEX + 1
    links = [link for n in NODES for link in (*n.nics, *n.fabric_ports)]
    links += [*LAB_LINKS, FABRIC_BRIDGE, configs.CNI_BRIDGE]
    assert len(set(links)) == len(links)
    assert all(len(link) <= 15 and link.startswith("dmnlab") for link in links)
    addresses = {n.address for n in NODES} | {configs.NODE_IP, configs.NODE_PEER_IP}
    assert len(addresses) == MAX_INDEX + 2
    assert len({n.cgroup for n in NODES}) == MAX_INDEX
    processes = [
        p for n in NODES for p in (n.agent_process, n.kubelet_process, n.containerd_process)
    ]
    assert len(set(processes)) == len(processes)
    assert not {"dmn-node", "kubelet", "containerd"} & set(processes)


def test_pod_blocks_are_disjoint_parts_of_the_one_pod_network() -> None:
    network = ipaddress.ip_network(configs.POD_NETWORK)
    blocks = [ipaddress.ip_network(b) for b in (configs.POD_CIDR, *(n.pod_block for n in NODES))]
    assert all(b.subnet_of(network) for b in blocks)
    assert all(not a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1 :])
    gateway = ipaddress.ip_address(configs.POD_GATEWAY)
    for node in NODES:
        doc = json.loads(configs.cni_conflist(configs.Layout(Path("/x")), node.pod_block))
        ((rng,),) = doc["plugins"][0]["ipam"]["ranges"]
        first, last = ipaddress.ip_address(rng["rangeStart"]), ipaddress.ip_address(rng["rangeEnd"])
        block = ipaddress.ip_network(node.pod_block)
        assert first in block and last in block and gateway not in block
        assert rng["subnet"] == configs.POD_NETWORK and rng["gateway"] == configs.POD_GATEWAY


def test_each_nodes_sockets_fit_sockaddr_un() -> None:
    for node in NODES:
        layout = node.layout(E2E_ROOT)
        registration = layout.kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
        for path in (registration, layout.nri_socket, Path(f"{layout.containerd_socket}.ttrpc")):
            assert len(str(path)) <= SOCKADDR_UN_PATH_MAX, path


def test_a_nodes_kubelet_config_is_its_own() -> None:
    node = NODES[1]
    layout = node.layout(E2E_ROOT)
    kubelet = configs.KubeletNode(node.name, node.address, node.cert, 1234, 1235)
    doc = yaml.safe_load(
        configs.kubelet_config(layout, kubelet, "/" + node.cgroup, E2E_ROOT / "pki")
    )
    assert doc["address"] == node.address and doc["port"] == 1234 and doc["healthzPort"] == 1235
    assert doc["tlsCertFile"] == str(E2E_ROOT / "pki" / f"{node.cert}.crt")
    assert doc["cgroupRoot"] == "/" + node.cgroup
    assert doc["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"
    argv = configs.kubelet_argv(Path("kubelet"), layout, kubelet, E2E_ROOT / "k.kubeconfig")
    assert f"--hostname-override={node.name}" in argv and f"--node-ip={node.address}" in argv
    assert f"--root-dir={layout.kubelet_root}" in argv


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--nodes", "2"), "--nodes needs --backend upstream"),
        (("--backend", "upstream", "--install", "helm", "--nodes", "3"), "--install process"),
        (("--backend", "upstream", "--nodes", "0"), "1 … 9, not 0"),
        (("--backend", "upstream", "--nodes", "10"), "1 … 9, not 10"),
    ],
)
def test_lab_up_refuses_nodes_it_cannot_run(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    """Refused before anything starts, with E_USAGE and no traceback."""
    result = dmn_lab("up", "--state-dir", str(tmp_path / "lab"), *args)
    no_traceback(result)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "E_USAGE" in result.stderr and said in result.stderr, result.stderr
    assert not (tmp_path / "lab" / "up").exists()
