"""``make gpu-wheels``: fill ``.whl/`` with what a lent GPU machine lacks to run scripts/gpu_check.sh.

That machine (the workplace's device tool: Python 3.12, x86-64, no package index) has torch, CuPy,
cuda-bindings, nvidia-ml-py, grpcio, numpy and the rest of KINDS.md's package list; what inferd and
its GPU tests need beyond it travels as wheels in the 64 MiB the tool carries. Computed, not listed:

1. the wanted requirements: inferd's core dependencies (pyproject.toml's ``dependencies``) and
   tritonclient's HTTP and gRPC clients (``tritonclient[http,grpc]``), their requirements followed
   through each downloaded wheel's METADATA (markers read for CPython 3.12 on Linux x86-64);
2. less every package the image holds (KINDS.md's "Python packages already there"), except
   ``ALWAYS``: carried whatever the image has (see there why);
3. each at the version installed in this virtual environment where it is installed (what the tests
   ran here), else the newest pip finds, fetched with the device README's own ``pip download``
   command (Python 3.12 manylinux x86-64 wheels, no dependencies);
4. perf_analyzer, if the whole still fits: its binary (from the tritonclient 2.41.1 wheel, as
   scripts/get_perf_analyzer.sh takes it), gzipped, with the two libraries it links that the image
   lacks (libcudart.so.12 from nvidia-cuda-runtime-cu12, libb64.so.0d from Debian's libb64-0d), in
   ``.whl/perf_analyzer/`` (a folder: ``pip install .whl/*.whl`` does not see it);
5. ``.whl/COMMIT``: the commit (and whether the tree has changes) that the check runs, since ``.git``
   does not travel.

Wheels of other versions are removed (two versions of one package stop the device's install). Fails
when the total passes ``LIMIT_MIB`` (the working tree and the carried folder share 64 MiB).

    .venv/bin/python scripts/gpu_wheels.py [--dest .whl] [--kinds PATH] [--no-perf-analyzer]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
KINDS = Path("/work/.library/device/KINDS.md")
LIMIT_MIB = 55
#: carried although the image has them: tritonclient's generated modules (which inferd loads for
#: ModelConfig and the gRPC service) refuse older runtimes (protobuf's gencode check, grpc's
#: GRPC_GENERATED_VERSION), and the image's versions are not known from here
ALWAYS = ("protobuf", "grpcio")
#: the device README's command, but the package
PIP_DOWNLOAD = [
    "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
    "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform",
    "manylinux1_x86_64", "--disable-pip-version-check", "-q",
]  # fmt: skip
#: the interpreter the markers are read for
ENVIRONMENT = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}
PERF_ANALYZER_VERSION = "2.41.1"


def image_packages(kinds: Path) -> set[str]:
    """The image's Python packages, from KINDS.md's list (normalised names)."""
    text = kinds.read_text()
    m = re.search(r"Packages: (.+?)\.\s*$", text, re.MULTILINE)
    if m is None:
        raise SystemExit(f"{kinds}: no 'Packages: ...' list (the image's Python packages) found")
    return {canonicalize_name(p.strip()) for p in m.group(1).split(",") if p.strip()}


def wanted() -> list[Requirement]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = [Requirement(r) for r in doc["project"]["dependencies"]]
    return [*reqs, Requirement("tritonclient[http,grpc]")]


def applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**ENVIRONMENT, "extra": e}) for e in (extras or {""}))


def local_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def wheel_of(dest: Path, name: str) -> Path | None:
    """The wheel of ``name`` in ``dest`` (file names normalise ``-`` and ``.`` to ``_``)."""
    key = canonicalize_name(name).replace("-", "_")
    for w in sorted(dest.glob("*.whl")):
        if canonicalize_name(w.name.split("-")[0]).replace("-", "_") == key:
            return w
    return None


def download(dest: Path, spec: str, extra: list[str] | None = None) -> None:
    cmd = [sys.executable, *PIP_DOWNLOAD, *(extra or []), "-d", str(dest), spec]
    print("  $ pip download ...", spec, flush=True)
    subprocess.run(cmd, check=True)


def requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    return [
        Requirement(line.split(":", 1)[1].strip())
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def fetch_wheels(dest: Path, image: set[str]) -> dict[str, Path]:
    """Every needed package's wheel in ``dest``, following requirements through the wheels."""
    todo: list[tuple[Requirement, set[str]]] = [(r, set(r.extras)) for r in wanted()]
    seen: dict[str, set[str]] = {}
    got: dict[str, Path] = {}
    while todo:
        req, extras = todo.pop(0)
        name = canonicalize_name(req.name)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        if name in image and name not in ALWAYS:
            continue
        wheel = wheel_of(dest, name)
        version = local_version(name)
        if wheel is not None and version is not None and f"-{version}-" not in wheel.name:
            wheel.unlink()  # another version: one of each
            wheel = None
        if wheel is None:
            download(dest, f"{name}=={version}" if version else str(Requirement(name)))
            wheel = wheel_of(dest, name)
            assert wheel is not None, name
        got[name] = wheel
        for sub in requires(wheel):
            if applies(sub, seen[name]):
                todo.append((sub, set(sub.extras)))
    return got


def perf_analyzer_bundle(folder: Path) -> None:
    """perf_analyzer's binary (gzipped) and the libraries it links that the image lacks."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        if not (folder / "perf_analyzer.gz").exists():
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                 "--platform", "manylinux1_x86_64", "--python-version", "3.12", "--implementation", "py",
                 "--disable-pip-version-check", "-d", tmp, f"tritonclient=={PERF_ANALYZER_VERSION}"],
                check=True,
            )  # fmt: skip
            whl = next(t.glob("tritonclient-*.whl"))
            binary = f"tritonclient-{PERF_ANALYZER_VERSION}.data/data/bin/perf_analyzer"
            with (
                zipfile.ZipFile(whl) as z,
                z.open(binary) as src,
                gzip.open(folder / "perf_analyzer.gz", "wb", compresslevel=9) as out,
            ):
                shutil.copyfileobj(src, out)
        if not (folder / "libcudart.so.12").exists():
            download(t, "nvidia-cuda-runtime-cu12")
            whl = next(t.glob("nvidia_cuda_runtime_cu12-*.whl"))
            with zipfile.ZipFile(whl) as z:
                name = next(n for n in z.namelist() if n.endswith("/libcudart.so.12"))
                (folder / "libcudart.so.12").write_bytes(z.read(name))
        if not (folder / "libb64.so.0d").exists():
            subprocess.run(["apt-get", "download", "-q", "libb64-0d"], cwd=tmp, check=True)
            deb = next(t.glob("libb64-0d_*.deb"))
            subprocess.run(["dpkg", "-x", str(deb), str(t / "x")], check=True)
            lib = next((t / "x").rglob("libb64.so.0d"))
            (folder / "libb64.so.0d").write_bytes(lib.resolve().read_bytes())


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        sha = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + (" (with uncommitted changes)" if dirty else "")


def size(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dest", type=Path, default=ROOT / ".whl")
    ap.add_argument("--kinds", type=Path, default=KINDS, help="the device's KINDS.md (its package list)")
    ap.add_argument("--no-perf-analyzer", action="store_true")
    args = ap.parse_args()
    dest: Path = args.dest
    dest.mkdir(exist_ok=True)
    got = fetch_wheels(dest, image_packages(args.kinds))
    for stale in sorted(set(dest.glob("*.whl")) - set(got.values())):
        print(f"  removing {stale.name} (not needed now)")
        stale.unlink()
    limit = LIMIT_MIB << 20
    wheels = size(list(got.values()))
    if wheels > limit:
        print(f"gpu-wheels: {wheels / 2**20:.1f} MiB of wheels, over {LIMIT_MIB} MiB", file=sys.stderr)
        return 1
    pa = dest / "perf_analyzer"
    if not args.no_perf_analyzer:
        perf_analyzer_bundle(pa)
        if wheels + size(list(pa.iterdir())) > limit:
            print(f"  perf_analyzer left out: with it the total passes {LIMIT_MIB} MiB")
            shutil.rmtree(pa)
    elif pa.exists():
        shutil.rmtree(pa)
    (dest / "COMMIT").write_text(commit() + "\n")
    files = sorted(p for p in dest.rglob("*") if p.is_file())
    for p in files:
        print(f"  {p.stat().st_size / 2**20:7.2f} MiB  {p.relative_to(dest)}")
    total = size(files)
    print(f"gpu-wheels: {len(got)} wheels{' + perf_analyzer' if pa.exists() else ''} in {dest}: "
          f"{total / 2**20:.1f} MiB (limit {LIMIT_MIB} MiB); commit {(dest / 'COMMIT').read_text().strip()}")  # fmt: skip
    return 1 if total > limit else 0


if __name__ == "__main__":
    sys.exit(main())
