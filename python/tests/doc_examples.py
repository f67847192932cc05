# Runs the simulator examples of the README ("Trying it without a GPU") and of the Python guide
# (docs/guide/python.md, "Without a GPU") as written: each fenced shell block is run by bash in
# an empty folder, with the installed `syncspy` (and `python`, with pytest) first on PATH and no
# simulated runtime on LD_LIBRARY_PATH, so that only `syncspy run --sim` can provide it. Then
# checks what the text around each block says the output holds.
# Usage: python doc_examples.py REPO_ROOT WORK_DIR   (called by scripts/wheel-check.sh)
import os
import re
import subprocess
import sys
import tempfile

root, work = sys.argv[1], sys.argv[2]


def block(doc, marker):
    """The fenced block of `doc` that contains `marker`, and the text after it."""
    lines = open(os.path.join(root, doc)).read().split("\n")
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    for a, b in zip(fences[::2], fences[1::2]):
        body = "\n".join(lines[a + 1 : b]) + "\n"
        if marker in body:
            return body, "\n".join(lines[b + 1 : b + 8])
    raise SystemExit("%s: no fenced block with %r" % (doc, marker))


def run(doc, marker):
    script, after = block(doc, marker)
    env = dict(os.environ)
    for k in ("LD_LIBRARY_PATH", "LD_PRELOAD", "SYNCSPY_LIB", "SYNCSPY_SIM_LIB", "PYCALLER"):
        env.pop(k, None)
    d = tempfile.mkdtemp(prefix="doc-", dir=work)
    p = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=d,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out = p.stdout.decode()
    print("== %s (%s): exit %d" % (doc, marker, p.returncode))
    print(out)
    return p.returncode, out, after


def claim(after, text):
    """The doc says `text` right after the block (so a changed example fails here)."""
    assert text in " ".join(after.split()), "the doc no longer says %r" % text


# README: a ctypes script under `syncspy run --sim`.
rc, out, after = run("README.md", "cat > stalls.py")
assert rc == 0, rc
claim(after, "names `stalls.py:9` (`memcpy_sync cudaMemcpy x3`) and `stalls.py:10` (`device_sync`)")
assert re.search(r"memcpy_sync cudaMemcpy  x3 .*\n\s+at \S*stalls\.py:9 in <module>", out), out
assert re.search(r"device_sync cudaDeviceSynchronize  x1 .*\n\s+at \S*stalls\.py:10 in <module>", out)

# The Python guide: a marked test under `syncspy run --sim -- python -m pytest --syncspy`.
rc, out, after = run("docs/guide/python.md", "cat > test_sim.py")
assert rc == 1, "the marked test must fail: exit %d" % rc
claim(after, "`syncspy: 1 host stall (any kind), at most 0 allowed:`")
claim(after, "`test_sim.py:10 cudaDeviceSynchronize x1 (device_sync, ...) in test_step`")
assert "syncspy: 1 host stall (any kind), at most 0 allowed:" in out
assert re.search(r"test_sim\.py:10 cudaDeviceSynchronize x1  \(device_sync, [0-9.]+ ms\)  in test_step", out)
print("doc examples: ok")
