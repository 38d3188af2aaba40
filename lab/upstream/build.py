"""Build the pinned upstream peers of the lab's upstream backend from their Go modules.

Why a build step of our own: the product ships only Python, but what it says to kubelet,
containerd, the scheduler and the API server must be proven against the real programs, and
this machine reaches only the Go module proxy — no release downloads, no registry. So each
peer is compiled from its module at the version pinned in ``versions.toml``.

Contract:
- Every component lands in ``<cache>/<name>-<version>-<go version>/bin`` with a ``.complete``
  stamp written last; a component whose stamp exists is reused untouched (warm build = a few
  stat calls). Changing one pin rebuilds only that component.
- ``<cache>`` is ``$DMN_UPSTREAM_CACHE`` or ``/var/cache/dmn-upstream`` — outside the clone, so
  CI on the machine that built it reuses it. GOMODCACHE and GOCACHE live there too.
- Kubernetes' own go.mod requires its staging modules at v0.0.0 with local replaces, which
  ``go install`` refuses; we build it through a wrapper module that replaces each of those
  ``k8s.io/*`` modules (read from the downloaded go.mod, not hard-coded) by its published
  version, and stamp the version with ldflags so binaries report v1.37.2.
- etcd's server module also carries local replaces; a wrapper that requires it builds.
- Whereabouts' go.mod replaces one dependency by another version; ``go install`` refuses any
  replace, so a wrapper requires it and carries the same (non-local) replaces, read from the
  downloaded go.mod.

Runs with the system ``python3`` (stdlib only): CI calls it before the project venv exists.
``--print-bin NAME`` prints the directory holding component NAME's binaries.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

LOG = logging.getLogger("dmn.lab.upstream.build")
VERSIONS = Path(__file__).with_name("versions.toml")
DEFAULT_CACHE = Path("/var/cache/dmn-upstream")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
COMPONENTS = (
    "kubernetes",
    "etcd",
    "containerd",
    "runc",
    "cni",
    "helm",
    "pause",
    "prometheus-operator",
    "cert-manager",
    "dranet",
    "multus",
    "whereabouts",
)


def cache_root() -> Path:
    return Path(os.environ.get("DMN_UPSTREAM_CACHE", str(DEFAULT_CACHE)))


def load_pins() -> dict[str, dict[str, object]]:
    with VERSIONS.open("rb") as fh:
        return tomllib.load(fh)


def go_version() -> str:
    out = subprocess.run(["go", "env", "GOVERSION"], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _lab_sources(name: str) -> Path:
    """The project's own Go sources for component ``name`` (may not exist)."""
    return Path(__file__).with_name(name)


def component_dir(name: str, pins: dict[str, dict[str, object]], gover: str) -> Path:
    """The cache directory of a build: keyed by the pinned version, the pin's ``recipe``
    (raised when what the lab builds from that version changes), a digest of the lab's own
    Go sources for the component (``lab/upstream/<name>/``, if any) and the Go version."""
    pin = pins[name]
    recipe = f"-r{pin['recipe']}" if "recipe" in pin else ""
    sources = _lab_sources(name)
    if sources.is_dir():
        digest = hashlib.sha256()
        for path in sorted(p for p in sources.rglob("*") if p.is_file()):
            digest.update(path.relative_to(sources).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        recipe += f"-{digest.hexdigest()[:10]}"
    return cache_root() / f"{name}-{pin['version']}{recipe}-{gover}"


def bin_dir(name: str) -> Path:
    """The bin directory of a component as pinned now (whether or not it is built)."""
    return component_dir(name, load_pins(), go_version()) / "bin"


def crd_dir(name: str) -> Path:
    """The directory of the CustomResourceDefinitions a component's module ships (the
    operators' CRDs the chart's optional objects are checked against)."""
    return component_dir(name, load_pins(), go_version()) / "crds"


def _go_env(workdir: Path, cgo: bool) -> dict[str, str]:
    env = dict(os.environ)
    root = cache_root()
    env.update(
        GOMODCACHE=str(root / "gomod"),
        GOCACHE=str(root / "gobuild"),
        # every binary is linked -s -w, so the DWARF the compiler writes for each package is
        # thrown away at link time; not writing it took a cold helm build from 260 to 233
        # CPU-s (138 to 122 s wall) here, 2026-12-03
        GOFLAGS="-buildvcs=false -mod=mod -gcflags=all=-dwarf=false",
        CGO_ENABLED="1" if cgo else "0",
        GOTOOLCHAIN="local",
        GOPATH=str(root / "gopath"),
    )
    env.setdefault("GOMAXPROCS", str(os.cpu_count() or 2))
    return env


def _die_with_parent() -> None:
    """Runs in the go child before exec: the kernel kills it when this process dies.

    A caller killed mid-build (a test's timeout killing ``build.py``) otherwise leaves ``go``
    compiling as an orphan; the component lock is then free, the next caller starts the same
    build beside it, and on a loaded machine neither ever finishes within a test's timeout."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _go(args: list[str], workdir: Path, cgo: bool = False) -> str:
    LOG.info("go %s (in %s)", " ".join(args), workdir)
    proc = subprocess.run(
        ["go", *args],
        cwd=workdir,
        env=_go_env(workdir, cgo),
        capture_output=True,
        text=True,
        preexec_fn=_die_with_parent,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise RuntimeError(f"go {' '.join(args[:2])} failed (exit {proc.returncode})")
    return proc.stdout


def _wrapper(work: Path, module_path: str, requires: list[str], replaces: list[str]) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    lines = [f"module {module_path}", "", "go 1.26", ""]
    lines += [f"require {r}" for r in requires]
    lines += [""] + [f"replace {r}" for r in replaces]
    (work / "go.mod").write_text("\n".join(lines) + "\n")


def _staging_replaces(work: Path, module: str, version: str, staging: str) -> list[str]:
    """Every k8s.io/* module the kubernetes go.mod requires at v0.0.0, replaced by `staging`."""
    info = json.loads(_go(["mod", "download", "-json", f"{module}@{version}"], work))
    gomod = Path(info["GoMod"]).read_text()
    names = sorted(set(re.findall(r"^\s*(k8s\.io/[\w./-]+) v0\.0\.0\s*$", gomod, re.M)))
    if not names:
        raise RuntimeError(f"no v0.0.0 staging requirements found in {info['GoMod']}")
    return [f"{n} => {n} {staging}" for n in names]


def _version_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.gitCommit=0000000000000000000000000000000000000000",
            f"-X {pkg}.buildDate={date}",
        ]
    return " ".join(["-s", "-w", *flags])


def build_kubernetes(pin: dict[str, object], out: Path, work: Path) -> None:
    module, version, staging = str(pin["module"]), str(pin["version"]), str(pin["staging"])
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text("module dmnlab/probe\n\ngo 1.26\n")
    replaces = _staging_replaces(work, module, version, staging)
    _wrapper(work, "dmnlab/kubernetes", [f"{module} {version}"], replaces)
    commands = [f"{module}/cmd/{c}" for c in pin["commands"]]  # type: ignore[attr-defined]
    imports = "\n".join(f'\t_ "{c}"' for c in commands)
    (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    _go(["mod", "tidy", "-e"], work)
    _go(
        ["build", "-trimpath", "-ldflags", _version_ldflags(version), "-o", f"{out}/", *commands],
        work,
    )


def build_etcd(pin: dict[str, object], out: Path, work: Path) -> None:
    module, version = str(pin["module"]), str(pin["version"])
    _wrapper(work, "dmnlab/etcd", [f"{module} {version}"], [])
    (work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{module}"\n')
    _go(["mod", "tidy", "-e"], work)
    _go(["build", "-trimpath", "-ldflags", "-s -w", "-o", f"{out}/etcd", module], work)


def _install(
    pkgs: list[str], version: str, out: Path, work: Path, cgo: bool = False, tags: str = ""
) -> None:
    work.mkdir(parents=True, exist_ok=True)
    env_args = ["install", "-trimpath", "-ldflags", "-s -w"]
    if tags:
        env_args += ["-tags", tags]
    os.environ["GOBIN"] = str(out)
    try:
        _go([*env_args, *[f"{p}@{version}" for p in pkgs]], work, cgo=cgo)
    finally:
        os.environ.pop("GOBIN", None)


def build_containerd(pin: dict[str, object], out: Path, work: Path) -> None:
    module, version = str(pin["module"]), str(pin["version"])
    pkgs = [f"{module}/cmd/{c}" for c in pin["commands"]]  # type: ignore[attr-defined]
    _install(pkgs, version, out, work)


def build_runc(pin: dict[str, object], out: Path, work: Path) -> None:
    _install([str(pin["module"])], str(pin["version"]), out, work, cgo=True, tags="seccomp")


def build_cni(pin: dict[str, object], out: Path, work: Path) -> None:
    module, version = str(pin["module"]), str(pin["version"])
    pkgs = [f"{module}/plugins/{p}" for p in pin["plugins"]]  # type: ignore[attr-defined]
    _install(pkgs, version, out, work)


def build_helm(pin: dict[str, object], out: Path, work: Path) -> None:
    _install([f"{pin['module']}/cmd/helm"], str(pin["version"]), out, work)


def build_pause(pin: dict[str, object], out: Path, work: Path) -> None:
    """The lab's own pause program (``pause/main.go``): no module dependencies, static."""
    source = _lab_sources("pause") / "main.go"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "go.mod").write_text("module dmnlab/pause\n\ngo 1.26\n")
    shutil.copyfile(source, work / "main.go")
    _go(["build", "-trimpath", "-ldflags", "-s -w", "-o", f"{out}/pause", "."], work)


def _copy_crds(pin: dict[str, object], out: Path, work: Path) -> None:
    """The module's CRD manifests into ``crds`` beside ``out``: the real schemas of the
    objects the lab or the chart create for that component.

    ``pin["crds"]`` names a folder of the module (every file matching ``pin["crd_files"]``,
    default ``*.yaml``, is copied as it is) or one multi-document manifest, from which only
    the CustomResourceDefinition documents are kept, one file per CRD named after it."""
    module, version = str(pin["module"]), str(pin["version"])
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "go.mod").exists():
        (work / "go.mod").write_text("module dmnlab/probe\n\ngo 1.26\n")
    info = json.loads(_go(["mod", "download", "-json", f"{module}@{version}"], work))
    source = Path(info["Dir"]) / str(pin["crds"])
    target = out.parent / "crds"
    target.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        found = crd_documents(source.read_text())
        if not found:
            raise RuntimeError(f"no CustomResourceDefinition in {source}")
        for name, text in found.items():
            (target / f"{name}.yaml").write_text(text)
        return
    files = sorted(source.glob(str(pin.get("crd_files", "*.yaml"))))
    if not files:
        raise RuntimeError(f"no CRD manifests in {source}")
    for crd in files:
        shutil.copyfile(crd, target / crd.name)


def crd_documents(manifest: str) -> dict[str, str]:
    """The CustomResourceDefinition documents of a multi-document YAML manifest, by
    ``metadata.name``. Read by lines (no YAML parser: this script runs on the stdlib
    alone): a document is a CRD when a top-level ``kind:`` line says so, and its name is
    the first ``name:`` line indented below the top-level ``metadata:``."""
    out = {}
    for document in re.split(r"^---[^\n]*$", manifest, flags=re.M):
        if not re.search(r"^kind:\s*CustomResourceDefinition\s*$", document, re.M):
            continue
        name = re.search(r"^metadata:\s*\n(?:\s+.*\n)*?\s+name:\s*(\S+)\s*$", document, re.M)
        if name is None:
            raise RuntimeError("a CustomResourceDefinition without metadata.name")
        out[name.group(1).strip("'\"")] = document.strip("\n") + "\n"
    return out


def build_prometheus_operator(pin: dict[str, object], out: Path, work: Path) -> None:
    """The operator's command is in its root module, whose go.mod replaces its two API
    submodules by local folders (``go install`` refuses that): a wrapper requires all three
    at the pinned version."""
    module, version = str(pin["module"]), str(pin["version"])
    requires = [
        f"{m} {version}" for m in (module, f"{module}/pkg/apis/monitoring", f"{module}/pkg/client")
    ]
    _wrapper(work, "dmnlab/prometheus-operator", requires, [])
    command = f"{module}/cmd/operator"
    (work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{command}"\n')
    _go(["mod", "tidy", "-e"], work)
    flags = f"-s -w -X github.com/prometheus/common/version.Version={version.lstrip('v')}"
    _go(["build", "-trimpath", "-ldflags", flags, "-o", f"{out}/operator", command], work)
    _copy_crds(pin, out, work)


def build_cert_manager(pin: dict[str, object], out: Path, work: Path) -> None:
    """cert-manager's controller and cainjector, from its root module's packages, plus its
    CRDs. Its commands are modules of their own (``.../cmd/controller`` and so on) that the
    module proxy does not serve, so the lab's two small mains (``cert-manager/*/main.go``)
    start the root module's own controllers and CA injector; a wrapper module requires the
    root module at the pinned version."""
    module, version = str(pin["module"]), str(pin["version"])
    _wrapper(work, "dmnlab/cert-manager", [f"{module} {version}"], [])
    sources = _lab_sources("cert-manager")
    for program in ("controller", "cainjector"):
        (work / program).mkdir()
        shutil.copyfile(sources / program / "main.go", work / program / "main.go")
    _go(["mod", "tidy", "-e"], work)
    for program in ("controller", "cainjector"):
        _go(
            ["build", "-trimpath", "-ldflags", "-s -w", "-o", f"{out}/{program}", f"./{program}"],
            work,
        )
    _copy_crds(pin, out, work)


def build_dranet(pin: dict[str, object], out: Path, work: Path) -> None:
    """dranet's one command: its go.mod has no local replaces, so ``go install`` builds it
    (pure Go: netlink, eBPF loading and the PCI database need no cgo)."""
    _install([f"{pin['module']}/cmd/dranet"], str(pin["version"]), out, work)


def build_multus(pin: dict[str, object], out: Path, work: Path) -> None:
    """Multus' thin plugin and its thick daemon and shim, the version stamped where
    ``--version`` reads it, and its CRD. Through a wrapper module: ``go install
    <pkg>@<version>`` first asks the proxy for the module's version list (to report a
    deprecation), which the proxy here refuses for this module (403), while the pinned
    version itself downloads."""
    module, version = str(pin["module"]), str(pin["version"])
    _wrapper(work, "dmnlab/multus", [f"{module} {version}"], [])
    commands = {c: f"{module}/cmd/{c}" for c in pin["commands"]}  # type: ignore[attr-defined]
    imports = "\n".join(f'\t_ "{p}"' for p in commands.values())
    (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    _go(["mod", "tidy", "-e"], work)
    flags = f"-s -w -X {module}/pkg/multus.version={version}"
    for name, package in commands.items():
        _go(["build", "-trimpath", "-ldflags", flags, "-o", f"{out}/{name}", package], work)
    _copy_crds(pin, out, work)


def module_replaces(gomod: str) -> list[str]:
    """The ``replace`` directives of a go.mod that name a module version (``old =>
    new version``), in ``go.mod`` syntax without the keyword; a replace by a local folder
    cannot be carried into another module and is left out."""
    lines = re.findall(r"^replace\s+(.+?)\s*$", gomod, re.M)
    for block in re.findall(r"^replace\s*\(\s*\n(.*?)^\)", gomod, re.M | re.S):
        lines += [line.strip() for line in block.splitlines() if line.strip()]
    kept = []
    for line in lines:
        line = line.split("//", 1)[0].strip()
        if "=>" not in line or line.startswith("("):
            continue
        target = line.split("=>", 1)[1].split()
        if len(target) == 2 and not target[0].startswith((".", "/")):
            kept.append(line)
    return kept


def build_whereabouts(pin: dict[str, object], out: Path, work: Path) -> None:
    """The Whereabouts CNI binary (package ``cmd``) and its reconciler ``ip-control-loop``
    (``cmd/controlloop``), through a wrapper module that carries the module's replaces, the
    version stamped in its ``pkg/version``; and its three CRDs."""
    module, version = str(pin["module"]), str(pin["version"])
    probe = work.with_name(work.name + "-probe")
    probe.mkdir(parents=True, exist_ok=True)
    (probe / "go.mod").write_text("module dmnlab/probe\n\ngo 1.26\n")
    info = json.loads(_go(["mod", "download", "-json", f"{module}@{version}"], probe))
    replaces = module_replaces(Path(info["GoMod"]).read_text())
    _wrapper(work, "dmnlab/whereabouts", [f"{module} {version}"], replaces)
    programs = {"whereabouts": f"{module}/cmd", "ip-control-loop": f"{module}/cmd/controlloop"}
    imports = "\n".join(f'\t_ "{p}"' for p in programs.values())
    (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    _go(["mod", "tidy", "-e"], work)
    flags = f"-s -w -X {module}/pkg/version.Version={version}"
    for name, package in programs.items():
        _go(["build", "-trimpath", "-ldflags", flags, "-o", f"{out}/{name}", package], work)
    _copy_crds(pin, out, work)


BUILDERS = {
    "kubernetes": build_kubernetes,
    "etcd": build_etcd,
    "containerd": build_containerd,
    "runc": build_runc,
    "cni": build_cni,
    "helm": build_helm,
    "pause": build_pause,
    "prometheus-operator": build_prometheus_operator,
    "cert-manager": build_cert_manager,
    "dranet": build_dranet,
    "multus": build_multus,
    "whereabouts": build_whereabouts,
}


def ensure(names: list[str]) -> dict[str, float]:
    """Build each named component unless its stamp exists; return seconds spent per component.

    Concurrent callers (two CI clones, a test and a developer) take turns per component
    through a lock in the cache, so a second caller waits for the first build and then
    reuses it instead of wiping a half-built directory."""
    pins, gover = load_pins(), go_version()
    spent: dict[str, float] = {}
    cache_root().mkdir(parents=True, exist_ok=True)
    for name in names:
        base = component_dir(name, pins, gover)
        stamp = base / ".complete"
        started = time.monotonic()
        with (cache_root() / f".{name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not stamp.exists():
                out = base / "bin"
                shutil.rmtree(base, ignore_errors=True)
                out.mkdir(parents=True)
                BUILDERS[name](pins[name], out, cache_root() / "work" / name)
                stamp.write_text(json.dumps({"version": pins[name]["version"], "go": gover}) + "\n")
        spent[name] = round(time.monotonic() - started, 1)
        LOG.info("component=%s dir=%s seconds=%s", name, base, spent[name])
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # validated by hand: Python 3.11's argparse checks an empty or list default of a
    # nargs="*" positional against `choices` as one value and refuses it
    parser.add_argument("components", nargs="*", metavar="COMPONENT", help=", ".join(COMPONENTS))
    parser.add_argument("--print-bin", metavar="NAME", choices=COMPONENTS)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.components) - set(COMPONENTS))
    if unknown:
        choices = ", ".join(COMPONENTS)
        parser.error(f"unknown component(s) {', '.join(unknown)}; choose from {choices}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.print_bin:
        print(bin_dir(args.print_bin))
        return 0
    try:
        spent = ensure(args.components or list(COMPONENTS))
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        LOG.error("E_UPSTREAM_BUILD %s", exc)
        return 1
    print(json.dumps({"seconds": spent}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
