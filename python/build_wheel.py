#!/usr/bin/env python3
"""Assembles the syncspy wheel from built binaries, with the standard library only.

    python3 python/build_wheel.py --bin-dir target/release --out dist

Why by hand rather than maturin: the wheel carries four artifacts of a cargo workspace (two
executables and two cdylibs, which maturin's `bin` bindings do not put side by side) plus pure
Python; assembling the zip needs no network, no build backend and no second cargo build, so
CI can package the debug artifacts its test command already built. The platform tag is the
manylinux one of the newest glibc symbol version the binaries need (read from their ELF
version-requirement sections).

`pip install .` builds the same wheel through hatchling (pyproject.toml at the root), whose
build hook (python/hatch_build.py) runs `cargo_build` and `stage_binaries` below; the Python
files, entry points and metadata are declared there, and scripts/wheel-check.sh checks that
both wheels carry the same files and entry points.
"""

import argparse
import base64
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# syncspy finds libsyncspy.so, libsimcudart.so (the simulated CUDA runtime of `--sim`) and
# syncspy-top next to its own binary.
BINARIES = ("syncspy", "syncspy-top", "libsyncspy.so", "libsimcudart.so")
# The cargo packages that build them.
CARGO_PACKAGES = ("syncspy-interpose", "syncspy-cli", "syncspy-tui", "simcuda")
PY_FILES = (
    ("syncspy/__init__.py", "syncspy/__init__.py"),
    ("_syncspy_cli.py", "_syncspy_cli.py"),
    ("syncspy_pytest.py", "syncspy_pytest.py"),
)
SHT_GNU_VERNEED = 0x6FFFFFFE


def glibc_needs(path):
    """The GLIBC_2.x versions an x86-64 ELF file requires, as (2, x) tuples."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit("%s: not a 64-bit little-endian ELF file" % path)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = []
    for i in range(shnum):
        o = shoff + i * shentsize
        _name, typ, _flags, _addr, off, size, link, info = struct.unpack_from(
            "<IIQQQQII", data, o
        )
        secs.append((typ, off, size, link, info))
    found = set()
    for typ, off, size, link, info in secs:
        if typ != SHT_GNU_VERNEED:
            continue
        stroff = secs[link][1]

        def string(at):
            end = data.index(b"\0", stroff + at)
            return data[stroff + at : end].decode()

        o = off
        for _ in range(info):
            _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, o)
            a = o + aux
            for _ in range(cnt):
                _hash, _flags, _other, name, anext = struct.unpack_from("<IHHII", data, a)
                m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", string(name))
                if m:
                    found.add((int(m.group(1)), int(m.group(2))))
                a += anext
            if not nxt:
                break
            o += nxt
    return found


def version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        m = re.search(r'^version = "([^"]+)"', f.read(), re.M)
    return m.group(1)


def cargo_build(profile, root=ROOT):
    """Builds BINARIES with cargo (`release` or `debug`); returns the folder that holds them."""
    if shutil.which("cargo") is None:
        raise SystemExit(
            "syncspy: cargo is not on PATH: the wheel is built from the Rust sources; install "
            "Rust (https://rustup.rs, 1.95 or newer) and a C compiler (cc), then retry"
        )
    cmd = ["cargo", "build", "--locked"]
    if profile == "release":
        cmd.append("--release")
    for p in CARGO_PACKAGES:
        cmd += ["-p", p]
    print("syncspy: " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=root, check=True, stdout=sys.stderr)
    target = os.path.join(root, os.environ.get("CARGO_TARGET_DIR") or "target")
    return os.path.join(target, "release" if profile == "release" else "debug")


def stage_binaries(bin_dir, dest, strip):
    """Copies BINARIES from bin_dir into dest (debug information removed with `strip`);
    returns the wheel's platform tag, from the newest glibc version they need."""
    needs = set()
    for b in BINARIES:
        src = os.path.join(bin_dir, b)
        if not os.path.isfile(src):
            raise SystemExit(
                "%s is missing: build the workspace first (cargo build --workspace)" % src
            )
        dst = os.path.join(dest, b)
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o755)
        if strip:
            subprocess.run(["objcopy", "--strip-debug", dst], check=True)
        needs |= glibc_needs(dst)
    glibc = max(needs | {(2, 17)})
    return "py3-none-manylinux_%d_%d_x86_64" % glibc


def record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", required=True, help="folder with " + ", ".join(BINARIES))
    ap.add_argument("--out", default=os.path.join(ROOT, "dist"), help="folder for the wheel")
    ap.add_argument(
        "--strip",
        action="store_true",
        help="remove debug information from the copies (objcopy --strip-debug)",
    )
    a = ap.parse_args()

    ver = version()
    name = "syncspy"
    distinfo = "%s-%s.dist-info" % (name, ver)
    files = []  # (archive name, bytes, executable)
    with tempfile.TemporaryDirectory() as tmp:
        tag = stage_binaries(a.bin_dir, tmp, a.strip)
        for b in BINARIES:
            with open(os.path.join(tmp, b), "rb") as f:
                files.append(("syncspy/bin/" + b, f.read(), True))
    for src, arc in PY_FILES:
        with open(os.path.join(HERE, src), "rb") as f:
            files.append((arc, f.read(), False))

    meta = (
        "Metadata-Version: 2.1\n"
        "Name: %s\n"
        "Version: %s\n"
        "Summary: Find where a CUDA program's CPU waits for its GPU, and the line that made it wait\n"
        "License: MIT OR Apache-2.0\n"
        "Requires-Python: >=3.8\n"
        "Classifier: Framework :: Pytest\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "\n"
        "syncspy, syncspy-top and libsyncspy.so (with the simulated CUDA runtime for "
        "`syncspy run --sim`), `import syncspy` (load the library before "
        "torch/jax/cupy, then `with syncspy.watch() as w:`), and a pytest plugin "
        "(`pytest --syncspy`, `@pytest.mark.syncspy(max_stalls=0)`).\n" % (name, ver)
    )
    wheel = (
        "Wheel-Version: 1.0\n"
        "Generator: syncspy python/build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        "Tag: %s\n" % tag
    )
    entry = (
        "[console_scripts]\n"
        "syncspy = _syncspy_cli:main\n"
        "syncspy-top = _syncspy_cli:top\n"
        "\n"
        "[pytest11]\n"
        "syncspy = syncspy_pytest\n"
    )
    files += [
        (distinfo + "/METADATA", meta.encode(), False),
        (distinfo + "/WHEEL", wheel.encode(), False),
        (distinfo + "/entry_points.txt", entry.encode(), False),
        (distinfo + "/top_level.txt", b"_syncspy_cli\nsyncspy\nsyncspy_pytest\n", False),
    ]
    record = [record_line(arc, data) for arc, data, _ in files]
    record.append(distinfo + "/RECORD,,")
    files.append((distinfo + "/RECORD", ("\n".join(record) + "\n").encode(), False))

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "%s-%s-%s.whl" % (name, ver, tag))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data, exe in files:
            zi = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100755 if exe else 0o100644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    print(path)


if __name__ == "__main__":
    sys.exit(main())
