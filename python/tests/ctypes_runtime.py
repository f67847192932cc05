# `import syncspy` sees what `syncspy run` sees, by the runtime's names, or says what it cannot
# see (issue 37, items 1 and 2). A program that loads the CUDA runtime itself and looks its
# functions up by name (ctypes.CDLL("libcudart.so.13").cudaMemcpy, a library loaded later
# that calls dlsym) reached syncspy's hooks only under LD_PRELOAD: in-process, with only
# libcudart.so.13 on the library path, `w.stalls` was [] and the pytest marker passed
# ("3 passed"); with libcuda.so.1 there too, the stalls had the driver's names
# (cuMemcpyHtoD x3, cuCtxSynchronize, cuStreamSynchronize).
#
# Each case runs in a fresh interpreter with `import syncspy` before the runtime, no
# LD_PRELOAD, on the simulated runtime (the wheel-check folder of links; a second folder
# holds libcudart.so.13 alone). Lines with stalls carry `# L:<name>`.
# Usage: python ctypes_runtime.py LIBPYCALLER OUTDIR   (env: SYNCSPY_DIR; run by import_first.py)
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap

assert "LD_PRELOAD" not in os.environ, os.environ["LD_PRELOAD"]
full = os.path.dirname(os.path.abspath(sys.argv[1]))  # libcudart.so.13, libcuda.so.1, ...
out = os.path.abspath(sys.argv[2])
work = os.path.join(out, "ctypes-runtime")
shutil.rmtree(work, ignore_errors=True)
only = os.path.join(work, "only")  # libcudart.so.13 alone, as in the issue
os.makedirs(only)
sim = os.path.realpath(os.path.join(full, "libcudart.so.13"))
os.symlink(sim, os.path.join(only, "libcudart.so.13"))


def write(name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text).lstrip())
    return path


def marks(path):
    m = {}
    for i, text in enumerate(open(path), 1):
        if "# L:" in text:
            m[text.split("# L:")[1].strip()] = i
    return m


def run(args, libdir, **env):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e["LD_LIBRARY_PATH"] = libdir
    e.update(env)
    p = subprocess.run(
        [sys.executable] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
        cwd=work,
    )
    return p.returncode, p.stdout.decode()


# A library loaded after `import syncspy` that finds the runtime itself, as cuda-python and
# JAX's plugins do: dlopen, then dlsym by name.
lookup = os.path.join(work, "liblookup.so")
src = write(
    "lookup.c",
    """
    #include <dlfcn.h>
    typedef int (*sync_fn)(void *);
    int lk_sync(int n) {
        void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
        if (!h) return -1;
        sync_fn f = (sync_fn)dlsym(h, "cudaStreamSynchronize");
        if (!f) return -2;
        for (int i = 0; i < n; i++)
            if (f((void *)0)) return -3;
        return 0;
    }
    """,
)
subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O1", "-o", lookup, src], check=True)

demo = write(
    "watch_demo.py",
    """
    import ctypes, json, sys
    import syncspy  # first, before the runtime

    rt = ctypes.CDLL("libcudart.so.13")
    n = 1 << 20
    dev = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(dev), n) == 0
    buf = ctypes.create_string_buffer(n)
    with syncspy.watch() as w:
        for _ in range(3):
            assert rt.cudaMemcpy(dev, buf, n, 1) == 0  # L:copy
        assert rt.cudaDeviceSynchronize() == 0  # L:device
        for _ in range(3):
            assert rt.cudaStreamSynchronize(None) == 0  # L:stream
        lk = ctypes.CDLL(sys.argv[1])  # loaded after the import, looks the runtime up itself
        assert lk.lk_sync(2) == 0  # L:lookup
    st = syncspy.status()
    print(json.dumps({"stalls": [str(s) for s in w.stalls], "kinds": [s.kind for s in w.stalls],
                      "calls_seen": w.calls_seen, "unseen": w.unseen, "status": st}))
    """,
)
m = marks(demo)
for libdir in (only, full):
    rc, text = run([demo, lookup], libdir)
    assert rc == 0, text
    got = json.loads(text.strip().splitlines()[-1])
    want = [
        "watch_demo.py:%d cudaMemcpy x3" % m["copy"],
        "watch_demo.py:%d cudaDeviceSynchronize x1" % m["device"],
        "watch_demo.py:%d cudaStreamSynchronize x3" % m["stream"],
        "watch_demo.py:%d cudaStreamSynchronize x2" % m["lookup"],
    ]
    assert sorted(got["stalls"]) == sorted(want), (libdir, got["stalls"])
    assert sorted(got["kinds"])[:2] == ["device_sync", "memcpy_sync"], got
    st = got["status"]
    assert st["armed"] and st["how"] == "import" and st["segment"], st
    assert st["unseen"] == [] and got["unseen"] == [], st
    assert st["redirected"] > 0 and st["calls_seen"] >= 9 and got["calls_seen"] >= 9, got
    assert "SyncspyWarning" not in text, text
    print("ctypes_runtime: %s: %s" % (os.path.basename(libdir), "; ".join(want)))

# Redirection off: nothing is seen, and status() and watch() say why.
rc, text = run([demo, lookup], only, SYNCSPY_IMPORT_PATCH="0")
assert rc == 0, text
got = json.loads(text.strip().splitlines()[-1])
assert got["stalls"] == [] and got["calls_seen"] == 0, got
assert got["status"]["unseen"] == got["unseen"] and len(got["unseen"]) == 1, got
assert "looked up by name" in got["unseen"][0] and "SYNCSPY_IMPORT_PATCH=0" in got["unseen"][0]
assert "SyncspyWarning: syncspy cannot see some CUDA calls" in text, text

# The pytest gate on the test: fails, naming the runtime calls at their lines.
tests = os.path.join(work, "gate")
os.makedirs(tests)
gate = os.path.join(tests, "test_ctypes.py")
with open(gate, "w") as f:
    f.write(
        textwrap.dedent(
            """
            import ctypes
            import pytest

            rt = ctypes.CDLL("libcudart.so.13")
            N = 1 << 20


            @pytest.mark.syncspy(max_stalls=0)
            def test_copy_and_sync():
                dev = ctypes.c_void_p()
                assert rt.cudaMalloc(ctypes.byref(dev), N) == 0
                buf = ctypes.create_string_buffer(N)
                assert rt.cudaMemcpy(dev, buf, N, 1) == 0  # L:copy
                assert rt.cudaDeviceSynchronize() == 0  # L:sync


            @pytest.mark.syncspy(max_stalls=0)
            def test_clean():
                pass


            def test_unmarked():
                assert rt.cudaStreamSynchronize(None) == 0
            """
        ).lstrip()
    )
gm = marks(gate)
registered = any(
    e.value == "syncspy_pytest" for e in importlib.metadata.entry_points(group="pytest11")
)
pytest = ["-m", "pytest", "--syncspy", "-p", "no:cacheprovider", "-rfw"]
pytest += [] if registered else ["-p", "syncspy_pytest"]
rc, text = run(pytest + [gate], only)
print(text)
assert rc == 1, "exit %d" % rc
assert "1 failed, 2 passed" in text, "expected 1 failed, 2 passed"
assert "syncspy: 2 host stalls (any kind), at most 0 allowed:" in text
for name, api in (("copy", "cudaMemcpy"), ("sync", "cudaDeviceSynchronize")):
    line = "test_ctypes.py:%d %s x1" % (gm[name], api)
    assert line in text, line
assert " cu" + "MemcpyHtoD" not in text and "cuCtxSynchronize" not in text
assert "saw no CUDA call" not in text, "test_clean ran after calls were seen"

# Redirection off: the marked tests see nothing while syncspy knows it cannot see look-ups by
# name: they fail, saying so, where they passed before (test_clean too: syncspy cannot tell
# a test that calls nothing from one whose calls it cannot see).
rc, text = run(pytest + [gate], only, SYNCSPY_IMPORT_PATCH="0")
print(text)
assert rc == 1, "exit %d" % rc
assert "2 failed, 1 passed" in text, "expected 2 failed, 1 passed"
# Counted in the failure sections only: pytest shortens the summary lines to the terminal's
# width, except where the CI variable is set.
failures = text.split("short test summary info")[0]
assert failures.count("syncspy saw no CUDA call while this test ran, and it cannot see") == 2
assert "syncspy cannot see: CUDA functions looked up by name" in text

# A marked test in a process where syncspy has seen no CUDA call at all, with the runtime
# loaded (here: it only allocates, which no hook sees): passes with a warning, listed.
quiet = os.path.join(tests, "test_quiet.py")
with open(quiet, "w") as f:
    f.write(
        "import ctypes\nimport pytest\n\nrt = ctypes.CDLL('libcudart.so.13')\n\n\n"
        "@pytest.mark.syncspy(max_stalls=0)\ndef test_alloc_only():\n"
        "    dev = ctypes.c_void_p()\n    assert rt.cudaMalloc(ctypes.byref(dev), 64) == 0\n"
    )
rc, text = run(pytest + [quiet], only)
print(text)
assert rc == 0, "exit %d" % rc
assert "1 passed, 1 warning" in text, "expected 1 passed, 1 warning"
assert "SyncspyWarning: syncspy saw no CUDA call while test_alloc_only ran" in text
assert "1 marked test saw no CUDA call" in text and "test_quiet.py::test_alloc_only" in text
print("ctypes_runtime: ok")
