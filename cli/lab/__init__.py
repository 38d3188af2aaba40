"""``dmn lab``: the embedded single-node lab (control plane only, for now).

    dmn lab up [--state-dir DIR] [--port N] [--detach] [--links recorded|netns]
    dmn lab up --backend upstream [--install process|helm] [--multus [thin|thick]] [--state-dir DIR]
    dmn lab apply -f FILE|DIR [--state-dir DIR]
    dmn lab get KIND [NAME] | KIND/NAME [-n NAMESPACE] [-o yaml|json|name] [--state-dir DIR]
    dmn lab delete -f FILE|DIR | KIND NAME | KIND/NAME [-n NAMESPACE] [--ignore-not-found]
    dmn lab down [--state-dir DIR]
    dmn lab run -f POD.yaml [--timeout SECONDS] [--state-dir DIR]
    dmn lab exec POD [-n NAMESPACE] [--state-dir DIR] -- COMMAND [ARG...]
    dmn lab demo [--timeout SECONDS] [--links recorded|netns] [-v]

``up`` runs the lab API server, installs the CRDs and builtin NetworkPlugins, starts the
controller and publishes the lab node's ResourceSlices; it writes ``kubeconfig`` and
``lab.pid`` under the state directory and stays in the foreground until SIGINT/SIGTERM
(or, with ``--detach``, runs in the background, logging to ``lab.log``). ``apply``
(``kubectl apply``'s client-side semantics: fields a previous apply set and the manifest
dropped are removed), ``get``, ``delete`` (arguments in kubectl's orders, options
anywhere) and ``down`` are clients of a running lab through the official Kubernetes client.
With ``--links netns`` (root) ``up`` also runs the Pods its API server is given
(:mod:`dmn.lab.pod_runner`); ``run`` creates Pods and waits until they run, ``exec`` runs a
command in a running Pod's network namespace (:mod:`dmn.lab.pod_client`; on the upstream
backend ``kubectl exec``). ``demo`` is the main job (see :mod:`dmn.lab.demo`). Failures
are reported as ``dmn lab: error[CODE]: message`` (exit 2 for bad input or no running lab,
1 when the API server refuses a request, a Pod does not start or the demo does not hold),
never as a traceback; ``exec`` exits with the command's status.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import yaml

from dmn.api.cluster import ApiFailure, Cluster, Invalid, NotFound, Unavailable, connect
from dmn.api.cluster import resources as r
from dmn.api.served_yaml import render as render_served
from dmn.cli.command_line import CommandParser, UsageError, run_command
from dmn.lab import manifests
from dmn.lab.state_dir import StateDir, default_state_dir
from dmn.lab.verdict import controller_verdict

if TYPE_CHECKING:
    from dmn.lab.demo import DemoReport

# the control plane (controller, compiler, allocator) is imported only by ``up`` and
# ``demo``: the client commands stay quick to start

START_TIMEOUT = 60.0
LINK_MODES = ("recorded", "netns")  # = dmn.lab.cluster.LINK_MODES (not imported: startup cost)
BACKENDS = ("embedded", "upstream")
BACKEND_HELP = "embedded (Python stand-ins) or upstream (real Kubernetes, built by lab/upstream)"
INSTALLS = ("process", "helm")
INSTALL_HELP = (
    "upstream backend: our driver as host processes (process), or by `helm install` of the "
    "chart with the locally built image, as Pods (helm)"
)
MULTUS_HELP = (
    "upstream backend: Multus ahead of the Pod network (thin plugin, the default, or thick: "
    "multus-daemon and multus-shim), and Whereabouts IPAM with its reconciler (built by "
    "lab/upstream/build.py multus whereabouts)"
)
LINKS_HELP = "the lab node's links: recorded facts, or a real veth pair in a lab-owned netns"
STOP_TIMEOUT = 30.0


class _Failure(Exception):
    def __init__(self, code: str, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _logging(level: int) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True
    )
    # many watches share one client's pool; a discarded idle connection is not a problem
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


# --- up / down ---------------------------------------------------------------------------


def _upstream_lab(
    state_dir: Path, install: str = "process", multus: bool | str = False, nodes: int = 1
) -> Any:
    from dmn.lab.upstream.cluster import UpstreamLab

    return UpstreamLab(state_dir, driver=_driver(install), multus=multus, nodes=nodes)


def _driver(install: str) -> Any:
    """How the upstream lab installs our driver: host processes, or ``helm install``."""
    if install == "helm":
        from dmn.lab.upstream.helm_driver import HelmDriver

        return HelmDriver()
    from dmn.lab.upstream.driver import ProcessDriver

    return ProcessDriver()


def _up(args: argparse.Namespace) -> int:
    state = StateDir(args.state_dir)
    if args.backend == "upstream":
        return _up_upstream(state, args.install, args.multus, args.nodes)
    if args.nodes != 1:
        raise _Failure("E_USAGE", "--nodes needs --backend upstream")
    if args.install != "process":
        raise _Failure("E_USAGE", "--install helm needs --backend upstream")
    if args.multus:
        raise _Failure("E_USAGE", "--multus needs --backend upstream")
    running = state.running_pid()
    if running is not None:
        raise _Failure("E_LAB_RUNNING", f"a lab is already running (pid {running}) in {state.root}")
    if args.detach:
        try:
            return _up_detached(state, args.port, args.links)
        except OSError as exc:
            raise _Failure("E_IO", f"state dir {state.root}: {exc.strerror}") from exc
    from dmn.lab.cluster import LabCluster, LabError

    _logging(logging.INFO)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    lab = LabCluster(state, port=args.port, links=args.links)
    runner = None
    try:
        url = lab.start()
        if args.links == "netns":  # real links: the lab runs Pods too
            from dmn.lab.pod_runner import LabPodRunner

            runner = LabPodRunner(lab, state).start()
    except LabError as exc:
        lab.stop()
        raise _Failure(exc.code, exc.message) from exc
    pid = os.getpid()
    state.write_pid(pid)
    pods = " pods=yes" if runner is not None else ""
    _out(f"lab up url={url} kubeconfig={state.kubeconfig} pid={pid}{pods}")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        if runner is not None:
            runner.stop()
        lab.stop()
        state.clear_runtime(pid)
    _out("lab down")
    return 0


def _up_upstream(state: StateDir, install: str, multus: str | None, nodes: int = 1) -> int:
    from dmn.lab.cluster import LabError
    from dmn.lab.upstream.lab_nodes import MAX_INDEX

    if not 1 <= nodes <= MAX_INDEX + 1:
        raise _Failure("E_USAGE", f"--nodes: 1 … {MAX_INDEX + 1}, not {nodes}")
    if nodes != 1 and install != "process":
        raise _Failure("E_USAGE", "--nodes runs our agent as host processes: --install process")

    if os.geteuid() != 0:
        raise _Failure("E_NOT_ROOT", "the upstream backend needs root (kubelet, containerd)")
    if state.running_pid() is not None:
        raise _Failure("E_LAB_RUNNING", f"an embedded lab is running in {state.root}")
    _logging(logging.INFO)
    try:
        lab = _upstream_lab(state.root, install, multus or False, nodes)
        url = lab.up()
    except LabError as exc:
        raise _Failure(exc.code, exc.message, 1) from exc
    _out(f"lab up backend=upstream url={url} kubeconfig={lab.admin_kubeconfig}")
    return 0


def _up_detached(state: StateDir, port: int, links: str) -> int:
    state.create()
    command = [sys.executable, "-m", "dmn", "lab", "up", "--state-dir", str(state.root)]
    command += ["--port", str(port), "--links", links]
    with state.log_file.open("ab") as log_file:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if state.running_pid() == child.pid and state.server_url():
            _out(f"lab up url={state.server_url()} kubeconfig={state.kubeconfig} pid={child.pid}")
            return 0
        if child.poll() is not None:
            raise _Failure("E_LAB_START", f"the lab exited at start; {_tail(state.log_file)}")
        time.sleep(0.1)
    child.terminate()
    raise _Failure(
        "E_LAB_START", f"the lab did not come up in {START_TIMEOUT:.0f}s; see {state.log_file}"
    )


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"no log at {path}"
    return " | ".join(text[-lines:]) or "empty log"


def _down(args: argparse.Namespace) -> int:
    state = StateDir(args.state_dir)
    upstream = _upstream_lab(state.root)
    if upstream.layout.root.exists():
        _logging(logging.WARNING)
        problems = upstream.down()
        if problems:
            raise _Failure("E_LAB_STOP", "; ".join(problems), 1)
        _out("lab down backend=upstream")
        return 0
    pid = state.running_pid()
    if pid is None:
        raise _Failure("E_LAB_NOT_RUNNING", f"no lab is running in {state.root}")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        # the lab removes its pid file once everything is stopped and saved
        if state.running_pid() != pid:
            _out(f"lab down pid={pid}")
            return 0
        time.sleep(0.1)
    raise _Failure("E_LAB_STOP", f"the lab (pid {pid}) did not stop in {STOP_TIMEOUT:.0f}s")


# --- clients -----------------------------------------------------------------------------


def _kubeconfig(args: argparse.Namespace) -> int:
    state = StateDir(args.state_dir)
    upstream = _upstream_lab(state.root)
    if upstream.running():
        _out(str(upstream.admin_kubeconfig))
        return 0
    if state.running_pid() is None:
        raise _Failure("E_LAB_NOT_RUNNING", f"no lab is running in {state.root}")
    _out(str(state.kubeconfig))
    return 0


@contextmanager
def _client(state_dir: Path) -> Iterator[Cluster]:
    state = StateDir(state_dir)
    upstream = _upstream_lab(state_dir)
    if upstream.running():
        cluster = upstream.admin()
        try:
            yield cluster
        except Unavailable as exc:
            raise _Failure("E_LAB_NOT_RUNNING", f"the API server is not reachable: {exc}") from exc
        finally:
            cluster.close()
        return
    if state.running_pid() is None or state.server_url() is None:
        raise _Failure(
            "E_LAB_NOT_RUNNING", f"no lab is running in {state.root} (start it: dmn lab up)"
        )
    cluster = Cluster(connect(kubeconfig=str(state.kubeconfig)))
    try:
        yield cluster
    except Unavailable as exc:
        raise _Failure("E_LAB_NOT_RUNNING", f"the lab API server is not reachable: {exc}") from exc
    finally:
        cluster.close()


def _api_failure(what: str, exc: ApiFailure) -> _Failure:
    if isinstance(exc, Invalid):
        causes = "; ".join(f"{c.field}: {c.message}" for c in exc.causes) or exc.message
        return _Failure("E_INVALID", f"{what}: {causes}", 1)
    if isinstance(exc, NotFound):
        return _Failure("E_NOT_FOUND", f"{what}: {exc.message}", 1)
    return _Failure("E_API", f"{what}: {exc.reason} ({exc.code}): {exc.message}", 1)


def _apply(args: argparse.Namespace) -> int:
    try:
        docs = manifests.load(Path(args.filename))
    except manifests.ManifestError as exc:
        raise _Failure(exc.code, exc.message) from exc
    failures: list[_Failure] = []
    with _client(args.state_dir) as cluster:
        for m in docs:
            what = f"{m.kind}/{m.name}"
            try:
                cluster.resource_for(m.doc["apiVersion"], m.kind)
            except NotFound:
                failure = _Failure(
                    "E_UNKNOWN_KIND",
                    f"{m.source}: {what}: the lab does not serve {m.kind} in {m.doc['apiVersion']}",
                    1,
                )
                _error(failure)
                failures.append(failure)
                continue
            try:
                stored = cluster.apply(m.doc)
                rejected = controller_verdict(cluster, stored)
            except Unavailable:
                raise
            except ApiFailure as exc:
                failure = _api_failure(f"{m.source}: {what}", exc)
                _error(failure)
                failures.append(failure)
                continue
            if rejected is not None:
                failure = _Failure(
                    rejected.code,
                    f"{m.source}: {what} rejected by the controller: {rejected.message}",
                    1,
                )
                _error(failure)
                failures.append(failure)
                continue
            _out(f"{what} applied")
    return 1 if failures else 0


def _delete(args: argparse.Namespace) -> int:
    """``delete -f FILE|DIR`` (every manifest's object) or ``delete KIND NAME``."""
    if (args.filename is None) == (not args.target):
        raise UsageError("give either -f FILE|DIR or KIND NAME (KIND/NAME)")
    targets: list[tuple[r.Resource | str, str, str | None, str]] = []
    if args.filename is not None:
        try:
            docs = manifests.load(Path(args.filename))
        except manifests.ManifestError as exc:
            raise _Failure(exc.code, exc.message) from exc
        for m in docs:
            ns = (m.doc.get("metadata") or {}).get("namespace") or args.namespace
            targets.append((m.doc["apiVersion"], m.kind, ns, m.name))
    else:
        kind, name = kind_and_name(args.target, name_required=True)
        res = resolve_kind(kind)
        assert name is not None
        targets.append((res, res.kind, args.namespace, name))
    failures = 0
    with _client(args.state_dir) as cluster:
        for api, kind, ns, name in targets:
            what = f"{kind}/{name}"
            try:
                res = api if isinstance(api, r.Resource) else cluster.resource_for(api, kind)
                namespace = (ns or "default") if res.namespaced else None
                cluster.delete(res, name, namespace)
            except Unavailable:
                raise
            except NotFound as exc:
                if args.ignore_not_found:
                    continue
                _error(_api_failure(what, exc))
                failures += 1
                continue
            except ApiFailure as exc:
                _error(_api_failure(what, exc))
                failures += 1
                continue
            _out(f"{what} deleted")
    return 1 if failures else 0


#: short names for the project's kinds and the DRA kinds (kind and plural always work)
SHORT_NAMES: dict[str, r.Resource] = {
    "topology": r.NETWORK_TOPOLOGIES,
    "topologies": r.NETWORK_TOPOLOGIES,
    "revision": r.NETWORK_TOPOLOGY_REVISIONS,
    "revisions": r.NETWORK_TOPOLOGY_REVISIONS,
    "plugin": r.NETWORK_PLUGINS,
    "plugins": r.NETWORK_PLUGINS,
    "policy": r.DEVICE_EXPOSURE_POLICIES,
    "policies": r.DEVICE_EXPOSURE_POLICIES,
    "attachment": r.NETWORK_ATTACHMENT_STATUSES,
    "attachments": r.NETWORK_ATTACHMENT_STATUSES,
    "claim": r.RESOURCE_CLAIMS,
    "claims": r.RESOURCE_CLAIMS,
    "slice": r.RESOURCE_SLICES,
    "slices": r.RESOURCE_SLICES,
    "class": r.DEVICE_CLASSES,
    "classes": r.DEVICE_CLASSES,
    "crd": r.CUSTOM_RESOURCE_DEFINITIONS,
    "crds": r.CUSTOM_RESOURCE_DEFINITIONS,
}


def resolve_kind(name: str) -> r.Resource:
    """A resource by kind, plural or short name (case-insensitive); first match wins."""
    wanted = name.lower()
    if wanted in SHORT_NAMES:
        return SHORT_NAMES[wanted]
    for res in r.ALL:
        if wanted in (res.kind.lower(), res.plural):
            return res
    raise _Failure("E_UNKNOWN_KIND", f"unknown kind {name!r}")


def _summary(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    if obj.get("kind") == "NetworkTopology" or "revision" in (obj.get("status") or {}):
        status = obj.get("status") or {}
        conditions = status.get("conditions") or []
        ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        revision = (status.get("revision") or {}).get("name", "-")
        condition = f"Ready={ready.get('status', 'Unknown')}  reason={ready.get('reason', '-')}"
        return f"{name}  {condition}  revision={revision}"
    return name


def kind_and_name(words: list[str], *, name_required: bool) -> tuple[str, str | None]:
    """kubectl's argument orders: ``KIND``, ``KIND NAME`` or ``KIND/NAME``."""
    if len(words) == 1 and "/" in words[0]:
        kind, _, name = words[0].partition("/")
        if kind and name:
            return kind, name
    if len(words) == 2 and "/" not in words[0]:
        return words[0], words[1]
    if len(words) == 1 and not name_required:
        return words[0], None
    wanted = "KIND NAME or KIND/NAME" if name_required else "KIND, KIND NAME or KIND/NAME"
    raise UsageError(f"expected {wanted}, got {' '.join(words) or 'nothing'}")


def _get(args: argparse.Namespace) -> int:
    kind, name = kind_and_name(args.target, name_required=False)
    res = resolve_kind(kind)
    namespace = args.namespace if res.namespaced else None
    args.name = name
    with _client(args.state_dir) as cluster:
        try:
            if args.name:
                objs = [
                    cluster.get(
                        res, args.name, namespace or ("default" if res.namespaced else None)
                    )
                ]
            else:
                objs = cluster.list(res, namespace).items
        except Unavailable:
            raise
        except ApiFailure as exc:
            raise _api_failure(f"{res.kind}/{args.name or ''}", exc) from exc
    for obj in objs:
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
    body: Any = objs[0] if args.name else {"apiVersion": "v1", "kind": "List", "items": objs}
    if args.output == "json":
        _out(json.dumps(body, indent=2, sort_keys=True))
    elif args.output == "yaml" and args.name:
        # the layout the controller's and the webhook's line:column positions refer to
        _out(render_served(body).rstrip())
    elif args.output == "yaml":
        _out(yaml.safe_dump(body, sort_keys=False).rstrip())
    else:
        for obj in objs:
            _out(_summary(obj) if args.output is None else obj["metadata"]["name"])
    return 0


# --- run / exec --------------------------------------------------------------------------


def _lab_failure(exc: Any) -> _Failure:
    from dmn.lab.pod_client import INPUT_CODES

    return _Failure(exc.code, exc.message, 2 if exc.code in INPUT_CODES else 1)


def _run_pods(args: argparse.Namespace) -> int:
    from dmn.lab import pod_client
    from dmn.lab.cluster import LabError
    from dmn.lab.pod_runner import read_record

    try:
        pods = pod_client.load_pods(Path(args.filename))
    except LabError as exc:  # the file's problem: bad input
        raise _Failure(exc.code, exc.message) from exc
    state = StateDir(args.state_dir)
    upstream = _upstream_lab(state.root).running()
    with _client(args.state_dir) as cluster:
        if not upstream and read_record(state) is None:
            raise _Failure(
                "E_LAB_LINKS",
                f"the lab in {state.root} runs no Pods: start it as root with "
                "dmn lab up --links netns",
            )
        try:
            pod_client.run_pods(cluster, pods, args.timeout, _out)
        except LabError as exc:
            raise _lab_failure(exc) from exc
        except Unavailable:
            raise
        except ApiFailure as exc:
            raise _api_failure("run", exc) from exc
    return 0


def _exec(args: argparse.Namespace) -> int:
    from dmn.lab import pod_client
    from dmn.lab.cluster import LabError

    if not args.argv:
        raise UsageError("give the command after --: dmn lab exec POD -- COMMAND [ARG...]")
    state = StateDir(args.state_dir)
    upstream = _upstream_lab(state.root)
    try:
        if upstream.running():
            return pod_client.kubectl_exec(
                upstream.admin_kubeconfig, args.namespace, args.pod, args.argv
            )
        with _client(args.state_dir) as cluster:
            try:
                sandbox = pod_client.sandbox_netns(cluster, state, args.namespace, args.pod)
            except Unavailable:
                raise
            except ApiFailure as exc:
                raise _api_failure(f"pod {args.namespace}/{args.pod}", exc) from exc
        return pod_client.exec_in_netns(sandbox, args.argv)
    except LabError as exc:
        raise _lab_failure(exc) from exc


# --- demo --------------------------------------------------------------------------------


def render(report: DemoReport) -> list[str]:
    lines = [
        f"lab up url={report.url} links={report.links} node slices={report.slices} "
        f"devices={report.devices}"
    ]
    if report.pools:
        lines.append(f"pools: {', '.join(report.pools)} (examples/ipam/pool.yaml)")
    lines.append("topologies:")
    for t in report.topologies:
        classes = ",".join(t.device_classes) or "-"
        codes = ",".join(t.codes) or "-"
        lines.append(
            f"  {t.name}: Ready={t.ready} reason={t.reason or '-'} "
            f"revision={t.revision or '-'} classes={classes} codes={codes}"
        )
    a = report.allocation
    if a is not None:
        lines.append(f"claim {a.claim} class={a.device_class}:")
        for res in a.results:
            consumed = ",".join(
                f"{k.rsplit('/', 1)[-1]}={v}"
                for k, v in (res.get("consumedCapacity") or {}).items()
            )
            lines.append(
                f"  allocated request={res.get('request')} device={res.get('device')} "
                f"pool={res.get('pool')} driver={res.get('driver')} consumed={consumed or '-'}"
            )
        for cfg in a.config:
            params = (cfg.get("opaque") or {}).get("parameters") or {}
            lines.append(
                f"  config source={cfg.get('source')} kind={params.get('kind')} "
                f"revision={(params.get('revisionRef') or {}).get('name')} "
                f"rootStep={params.get('rootStep')}"
            )
        if a.error:
            lines.append(f"  not allocated: {a.error}")
    n = report.negative
    if n is not None:
        got = n.result
        verdict = "rejected" if n.rejected else "NOT rejected as expected"
        detail = (
            f"Ready={got.ready} reason={got.reason} codes={','.join(got.codes) or '-'}"
            if got
            else n.api_error
        )
        lines.append(f"negative {n.source} ({n.name}): {verdict}: {detail} (expect {n.expected})")
    if report.pods:
        lines.append("pods:")
        lines += [f"  {line}" for line in report.pods]
    lines.append("lab down")
    lines += [f"problem: {p}" for p in report.problems]
    lines.append("demo: OK" if report.ok else "demo: FAILED")
    return lines


def _demo_upstream(args: argparse.Namespace) -> int:
    from dmn.lab.cluster import LabError
    from dmn.lab.upstream.demo import run_upstream_demo

    if os.geteuid() != 0:
        raise _Failure("E_NOT_ROOT", "the upstream backend needs root (kubelet, containerd)")
    _logging(logging.INFO if args.verbose else logging.WARNING)
    try:
        report = run_upstream_demo(timeout=max(args.timeout, 120.0), driver=_driver(args.install))
    except LabError as exc:
        raise _Failure(exc.code, exc.message, 1) from exc
    for line in report.lines:
        _out(line)
    _out("demo: OK" if report.ok else "demo: FAILED")
    return 0 if report.ok else 1


def _demo(args: argparse.Namespace) -> int:
    from dmn.lab.cluster import LabError

    if args.backend == "upstream":
        return _demo_upstream(args)
    if args.install != "process":
        raise _Failure("E_USAGE", "--install helm needs --backend upstream")
    from dmn.lab.demo import run_demo

    _logging(logging.INFO if args.verbose else logging.WARNING)
    try:
        report = run_demo(timeout=args.timeout, links=args.links)
    except LabError as exc:
        raise _Failure(exc.code, exc.message, 1) from exc
    except manifests.ManifestError as exc:
        raise _Failure(exc.code, exc.message) from exc
    except ApiFailure as exc:
        raise _api_failure("demo", exc) from exc
    for line in render(report):
        _out(line)
    return 0 if report.ok else 1


# --- entry -------------------------------------------------------------------------------


def _parser() -> CommandParser:
    p = CommandParser(prog="dmn lab", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def with_state(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--state-dir", type=Path, default=default_state_dir())
        return sp

    up = with_state(sub.add_parser("up", help="start the lab"))
    up.add_argument("--port", type=int, default=0, help="API server port (0: any free port)")
    up.add_argument("--detach", action="store_true", help="run in the background")
    up.add_argument("--links", choices=LINK_MODES, default="recorded", help=LINKS_HELP)
    up.add_argument("--backend", choices=BACKENDS, default="embedded", help=BACKEND_HELP)
    up.add_argument("--install", choices=INSTALLS, default="process", help=INSTALL_HELP)
    up.add_argument(
        "--multus", nargs="?", const="thin", choices=("thin", "thick"), help=MULTUS_HELP
    )
    up.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="upstream backend: how many nodes (lab-node, lab-node-1, …), each with its own "
        "kubelet, containerd and agent, their lab NICs on one shared fabric (default 1)",
    )
    with_state(sub.add_parser("down", help="stop a running lab"))
    with_state(sub.add_parser("kubeconfig", help="print the running lab's admin kubeconfig path"))
    apply = with_state(sub.add_parser("apply", help="create or update objects from manifests"))
    apply.add_argument("-f", "--filename", required=True, help="a manifest file or directory")
    get = with_state(sub.add_parser("get", help="show objects", intermixed=True))
    get.add_argument("target", nargs="+", metavar="KIND [NAME] | KIND/NAME")
    get.add_argument("-n", "--namespace", default=None)
    get.add_argument("-o", "--output", choices=["yaml", "json", "name"])
    delete = with_state(sub.add_parser("delete", help="delete objects", intermixed=True))
    delete.add_argument("target", nargs="*", metavar="KIND NAME | KIND/NAME")
    delete.add_argument(
        "-f", "--filename", help="delete the objects of a manifest file or directory"
    )
    delete.add_argument("-n", "--namespace", default=None)
    delete.add_argument("--ignore-not-found", action="store_true")
    run = with_state(sub.add_parser("run", help="create Pods and wait until they run"))
    run.add_argument("-f", "--filename", required=True, help="a Pod manifest file or directory")
    run.add_argument("--timeout", type=float, default=120.0, help="bound on each Pod's start (s)")
    ex = with_state(sub.add_parser("exec", help="run a command in a Pod: exec POD -- CMD"))
    ex.add_argument("pod", metavar="POD")
    ex.add_argument("-n", "--namespace", default="default")
    demo = sub.add_parser("demo", help="the main job: up, examples, a claim, down")
    demo.add_argument("--timeout", type=float, default=60.0, help="bound on each wait (s)")
    demo.add_argument("-v", "--verbose", action="store_true")
    demo.add_argument("--links", choices=LINK_MODES, default="recorded", help=LINKS_HELP)
    demo.add_argument("--backend", choices=BACKENDS, default="embedded", help=BACKEND_HELP)
    demo.add_argument("--install", choices=INSTALLS, default="process", help=INSTALL_HELP)
    return p


def _error(failure: _Failure) -> None:
    sys.stderr.write(f"dmn lab: error[{failure.code}]: {failure.message}\n")


def run(argv: list[str]) -> int:
    # ``exec POD [options] -- COMMAND...``: what follows ``--`` is the command, untouched
    command: list[str] = []
    if argv[:1] == ["exec"] and "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]

    def dispatch(args: argparse.Namespace) -> int:
        args.argv = command
        return _dispatch(args)

    return run_command(_parser(), argv, dispatch)


def _dispatch(args: argparse.Namespace) -> int:
    handlers = {
        "up": _up,
        "down": _down,
        "apply": _apply,
        "get": _get,
        "delete": _delete,
        "demo": _demo,
        "kubeconfig": _kubeconfig,
        "run": _run_pods,
        "exec": _exec,
    }
    try:
        return handlers[args.command](args)
    except _Failure as failure:
        _error(failure)
        return failure.status
