"""The OVSDB edge of ``ovs/*`` (:mod:`dmn.opcodes.ovs.ovsdb_session`) against a real
``ovsdb-server`` and ``ovs-vswitchd`` on this machine's kernel.

This kernel has no ``openvswitch.ko``, so the switch here uses the userspace datapath
(``datapath_type=netdev``); the executor itself is tested in the kernel lab, where netdevsim
gives it the switchdev representors it insists on. Here: the schema comes from the server, a
transaction inserts rows with caller-chosen UUIDs and waits for ``ovs-vswitchd``, and an
unreachable server is a bounded ``E_OVSDB``, not a hang.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.opcodes.executor import ExecutorError
from dmn.opcodes.ovs.ovsdb_session import OvsdbSession
from tests.kernel.scratch import scratch_netns
from tests.kernel_lab.ovs_switch import BRIDGE, OvsSwitch, ovs_switch


@pytest.fixture
def switch() -> Iterator[OvsSwitch]:
    with scratch_netns("ovsh") as ns, ovs_switch(ns, datapath="netdev") as sw:
        yield sw


def test_rows_inserted_with_chosen_uuids_and_applied_by_vswitchd(switch: OvsSwitch) -> None:
    port_id, iface_id = uuid.uuid4(), uuid.uuid4()
    with OvsdbSession(switch.remote) as session:
        view = session.view()
        bridge = view.bridge_named(BRIDGE)
        assert bridge is not None and view.port_named(BRIDGE) is not None  # its local port

        def build(txn: Any) -> None:
            i = txn.insert(session.idl.tables["Interface"], iface_id, persist_uuid=True)
            i.name, i.type = "int-test0", "internal"
            p = txn.insert(session.idl.tables["Port"], port_id, persist_uuid=True)
            p.name, p.interfaces, p.tag = "int-test0", [i], [7]
            session.row("Bridge", bridge.uuid).addvalue("ports", p.uuid)

        session.transact("add int-test0", build, wait_applied=True)
    port = next(r for r in switch.rows("Port") if r["name"] == "int-test0")
    assert (port["_uuid"], port["interfaces"], port["tag"]) == (str(port_id), str(iface_id), 7)
    assert "int-test0" in switch.dp_ports()  # ovs-vswitchd made it a datapath port
    with OvsdbSession(switch.remote) as session:
        view = session.view()
        assert view.ports[str(port_id)].tag == 7
        assert view.bridges_of_port(str(port_id)) == [view.bridges[bridge.uuid]]

        def delete(txn: Any) -> None:
            session.row("Bridge", bridge.uuid).delvalue("ports", port_id)
            session.row("Port", str(port_id)).delete()

        session.transact("delete int-test0", delete, wait_applied=True)
    assert "int-test0" not in switch.vsctl("list-ports", BRIDGE).split()
    assert "int-test0" not in switch.dp_ports()


@pytest.mark.adversarial
def test_an_unreachable_server_is_a_bounded_refusal(switch: OvsSwitch) -> None:
    with pytest.raises(ExecutorError) as err:
        OvsdbSession(f"unix:{switch.rundir / 'nobody.sock'}", timeout=2)
    assert err.value.code == "E_OVSDB"
