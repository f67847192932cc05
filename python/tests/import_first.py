# `import syncspy` before the CUDA runtime is loaded, no LD_PRELOAD: the ctypes library
# loaded afterwards (linked against libcudart.so.13, the simulated runtime) binds to the
# hooks, and syncspy.watch() names this file's lines. Lines with stalls carry `# L:<name>`.
# Usage: python import_first.py LIBPYCALLER
import os
import sys
import threading

assert "LD_PRELOAD" not in os.environ, os.environ["LD_PRELOAD"]
import syncspy  # noqa: E402  (first, before the runtime)

assert syncspy.armed(), syncspy.status()
assert syncspy.status()["how"] == "import", syncspy.status()
assert syncspy.status()["segment"] is None  # no CUDA call yet

import ctypes  # noqa: E402

lib = ctypes.CDLL(sys.argv[1])
MARK = {}
for i, text in enumerate(open(__file__), 1):
    if "# L:" in text:
        MARK[text.split("# L:")[1].strip()] = i


def worker():
    lib.pc_sync()  # L:worker


with syncspy.watch() as w:
    for _ in range(3):
        # 0: the hook found the real function (RTLD_NEXT from a dlopened library finds
        # nothing; the loaded runtime is found by soname) and returned its result.
        assert lib.pc_sync() == 0  # L:loop
    t = threading.Thread(target=worker)
    t.start()
    t.join()
stalls = w.stalls
print([str(s) for s in stalls])
by_line = {(s.line, s.api): s for s in stalls}
loop = by_line[(MARK["loop"], "cudaStreamSynchronize")]
assert loop.count == 3 and loop.kind == "stream_sync", repr(loop)
assert os.path.basename(loop.file) == "import_first.py" and loop.function == "<module>"
assert str(loop) == "import_first.py:%d cudaStreamSynchronize x3" % MARK["loop"], str(loop)
assert loop.total_ns > 0
assert by_line[(MARK["worker"], "cudaStreamSynchronize")].count == 1
assert w.count() == 4 and w.count(kinds=["event_sync"]) == 0
seg = syncspy.status()["segment"]
assert seg and os.path.basename(seg).startswith("syncspy-%d-" % os.getpid()), seg

# The calling thread only: the worker's stall is left out.
with syncspy.watch(threads="current") as w:
    lib.pc_sync()  # L:current
    t = threading.Thread(target=worker)
    t.start()
    t.join()
assert [(s.line, s.count) for s in w.stalls] == [(MARK["current"], 1)], w.stalls

# Outside any window: not counted in the next one.
lib.pc_sync()
with syncspy.watch() as w:
    pass
assert w.stalls == [], w.stalls

# Functions looked up by name (ctypes on the runtime's own handle, a library loaded later that
# calls dlsym), by the runtime's names, and the pytest gate on them (issue 37): in fresh
# interpreters, with only libcudart.so.13 on the library path too.
import subprocess  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
subprocess.run(
    [sys.executable, os.path.join(here, "ctypes_runtime.py"), sys.argv[1], os.getcwd()],
    check=True,
)
print("import_first: ok")
