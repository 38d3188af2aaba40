"""A private Open vSwitch for one test: its own ``ovsdb-server`` and ``ovs-vswitchd``.

Never the system service: the database file, the runtime/log directory, the OVSDB unix socket
and both control sockets live in a fresh directory under ``/tmp`` (short: a unix socket path
has 108 bytes), the daemons are this process's children, and :func:`ovs_switch` stops them
and deletes the directory even when the test fails. ``ovs-vswitchd`` runs inside the test's
stand-in host namespace with the kernel datapath (``datapath_type=system``,
``openvswitch.ko`` of the lab kernel), so the datapath and its ports live in that namespace
and go with it. The test-side reads use ``ovs-vsctl``/``ovs-appctl`` as an independent
reader; the executor under test uses only the Python IDL.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.waiting import wait_for

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
BRIDGE = "brovs0"


@dataclass(frozen=True)
class OvsSwitch:
    rundir: Path
    netns: str

    @property
    def socket(self) -> Path:
        return self.rundir / "db.sock"

    @property
    def remote(self) -> str:
        return f"unix:{self.socket}"

    def vsctl(self, *args: str, wait: bool = True) -> str:
        argv = ["ovs-vsctl", f"--db={self.remote}", "--timeout=30"]
        if not wait:
            argv.append("--no-wait")
        proc = subprocess.run(
            [*argv, *args], capture_output=True, text=True, check=False, env=self.env()
        )
        assert proc.returncode == 0, f"ovs-vsctl {args}: {proc.stderr}"
        return proc.stdout

    def appctl(self, *args: str) -> str:
        target = str(self.rundir / "ovs-vswitchd.ctl")
        proc = subprocess.run(
            ["ovs-appctl", "-t", target, *args], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, f"ovs-appctl {args}: {proc.stderr}"
        return proc.stdout

    def env(self) -> dict[str, str]:
        d = str(self.rundir)
        extra = {"OVS_RUNDIR": d, "OVS_LOGDIR": d, "OVS_DBDIR": d, "OVS_SYSCONFDIR": d}
        return {**os.environ, **extra}

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of a table as ``{column: value}`` (``ovs-vsctl -f json list``)."""
        return self.tables(table)[table]

    def tables(self, *names: str) -> dict[str, list[dict[str, Any]]]:
        """:meth:`rows` of several tables from one ``ovs-vsctl`` run (one consistent read,
        and one process: each costs about a second under TCG)."""
        argv: list[str] = ["--format=json"]
        for name in names:
            argv += [*(["--"] if len(argv) > 1 else []), "list", name]
        out, decoder, docs, at = self.vsctl(*argv, wait=False), json.JSONDecoder(), [], 0
        while out[at:].strip():
            at += len(out[at:]) - len(out[at:].lstrip())
            doc, at = decoder.raw_decode(out, at)
            docs.append(doc)
        assert len(docs) == len(names), out
        return {
            name: [
                {h: _value(v) for h, v in zip(doc["headings"], d, strict=True)} for d in doc["data"]
            ]
            for name, doc in zip(names, docs, strict=True)
        }

    def state(self) -> dict[str, Any]:
        """What undo must restore: bridges and their ports, every Port and Interface row
        (name, tag, trunks, external IDs, UUIDs), and the datapath's ports. A bridge's ports
        are what ``ovs-vsctl list-ports`` lists: its Port rows but its own local port."""
        t = self.tables("Bridge", "Port", "Interface")
        ports = {
            r["name"]: (r["_uuid"], r["tag"], r["trunks"], r["external_ids"]) for r in t["Port"]
        }
        ifaces = {r["name"]: (r["_uuid"], r["external_ids"]) for r in t["Interface"]}
        port_names = {r["_uuid"]: r["name"] for r in t["Port"]}
        bridges = {}
        for r in t["Bridge"]:
            members = r["ports"] if isinstance(r["ports"], list) else [r["ports"]]
            names = sorted(port_names[u] for u in members if port_names[u] != r["name"])
            bridges[r["name"]] = (r["_uuid"], names)
        return {"bridges": bridges, "ports": ports, "interfaces": ifaces, "dp": self.dp_ports()}

    def dp_ports(self) -> list[str]:
        """The kernel datapath's port names (``dpif/show``), sorted."""
        names = []
        for line in self.appctl("dpif/show").splitlines():
            parts = line.split()  # "    rep0 1/2: (system)"
            if len(parts) >= 2 and re.fullmatch(r"\d+/\d+:", parts[1]):
                names.append(parts[0])
        return sorted(names)


def _value(v: Any) -> Any:
    """``ovs-vsctl`` JSON atoms: ["uuid", x], ["set", [...]], ["map", [[k, v], ...]]."""
    if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str):
        kind, data = v
        if kind == "uuid":
            return data
        if kind == "set":
            return sorted(_value(x) for x in data)
        if kind == "map":
            return {k: _value(x) for k, x in data}
    return v


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def ovs_switch(
    netns: str, datapath: str = "system", rundir: Path | None = None
) -> Iterator[OvsSwitch]:
    """ovsdb-server + ovs-vswitchd (in ``netns``) with one bridge, :data:`BRIDGE`, of
    ``datapath`` type: ``system`` (the kernel's ``openvswitch.ko``, lab kernel) or ``netdev``
    (the userspace datapath, for this machine's kernel, which has no OVS module).
    ``rundir``: an empty directory the caller made (so it knows the OVSDB socket before the
    switch starts), else a fresh one; either is removed on exit."""
    if datapath == "system":
        subprocess.run(["modprobe", "openvswitch"], check=True, capture_output=True)
    rundir = rundir or Path(tempfile.mkdtemp(prefix="ovs", dir="/tmp"))
    switch = OvsSwitch(rundir, netns)
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        db = rundir / "conf.db"
        subprocess.run(["ovsdb-tool", "create", str(db), str(SCHEMA)], check=True)
        server = [
            "ovsdb-server", str(db), f"--remote=punix:{switch.socket}",
            f"--unixctl={rundir / 'ovsdb-server.ctl'}",
            f"--log-file={rundir / 'ovsdb-server.log'}", "--no-chdir",
        ]  # fmt: skip
        vswitchd = [
            "ip", "netns", "exec", netns, "ovs-vswitchd", switch.remote,
            f"--unixctl={rundir / 'ovs-vswitchd.ctl'}",
            f"--log-file={rundir / 'ovs-vswitchd.log'}", "--no-chdir",
        ]  # fmt: skip
        for argv, out in ((server, "ovsdb-server.out"), (vswitchd, "ovs-vswitchd.out")):
            log = open(rundir / out, "wb")  # noqa: SIM115 - closed in the finally below
            logs.append(log)
            procs.append(
                subprocess.Popen(argv, env=switch.env(), stdout=log, stderr=subprocess.STDOUT)
            )
            if argv is server:
                wait_for(switch.socket.exists, timeout=20, interval=0.05, what="OVSDB socket")
                switch.vsctl("init", wait=False)
        # without --no-wait ovs-vsctl waits until ovs-vswitchd applied the bridge
        switch.vsctl("add-br", BRIDGE, "--", "set", "bridge", BRIDGE, f"datapath_type={datapath}")
        yield switch
    except BaseException:
        for name in ("ovsdb-server.log", "ovs-vswitchd.log", "ovs-vswitchd.out"):
            path = rundir / name
            if path.exists():  # shown with the failing test's captured output
                print(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-30:]))
        raise
    finally:
        if len(procs) == 2 and procs[1].poll() is None:
            # removes the kernel datapath and its ports before the daemon exits
            subprocess.run(
                ["ovs-appctl", "-t", str(rundir / "ovs-vswitchd.ctl"), "exit", "--cleanup"],
                capture_output=True, check=False, timeout=30,
            )  # fmt: skip
        for proc in reversed(procs):
            _stop(proc)
        for log in logs:
            log.close()
        shutil.rmtree(rundir, ignore_errors=True)
