#!/usr/bin/env python3
"""Assembles the syncspy wheel from built binaries, with the standard library only.

    python3 python/build_wheel.py --bin-dir target/release --out dist

Why by hand rather than maturin: the wheel carries three artifacts of a cargo workspace (two
executables and a cdylib, which maturin's `bin` bindings do not put side by side) plus pure
Python; assembling the zip needs no network, no build backend and no second cargo build, so
CI can package the debug artifacts its test command already built. The platform tag is the
manylinux one of the newest glibc symbol version the binaries need (read from their ELF
version-requirement sections).
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
BINARIES = ("syncspy", "syncspy-top", "libsyncspy.so")
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


def record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", required=True, help="folder with syncspy, syncspy-top, libsyncspy.so")
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
    needs = set()
    with tempfile.TemporaryDirectory() as tmp:
        for b in BINARIES:
            src = os.path.join(a.bin_dir, b)
            if not os.path.isfile(src):
                raise SystemExit(
                    "%s is missing: build the workspace first (cargo build --workspace)" % src
                )
            dst = os.path.join(tmp, b)
            shutil.copyfile(src, dst)
            if a.strip:
                subprocess.run(["objcopy", "--strip-debug", dst], check=True)
            needs |= glibc_needs(dst)
            with open(dst, "rb") as f:
                files.append(("syncspy/bin/" + b, f.read(), True))
    for src, arc in PY_FILES:
        with open(os.path.join(HERE, src), "rb") as f:
            files.append((arc, f.read(), False))

    glibc = max(needs | {(2, 17)})
    tag = "py3-none-manylinux_%d_%d_x86_64" % glibc
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
        "syncspy, syncspy-top and libsyncspy.so, `import syncspy` (load the library before "
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
