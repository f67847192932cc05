# Runs the suite of suite/test_gpu.py under the installed plugin and checks what it reports.
# Usage: python check_pytest.py OUTDIR [pytest args...]   (env: PYCALLER)
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

here = os.path.dirname(os.path.abspath(__file__))
suite = os.path.join(here, "suite")
out = sys.argv[1]
extra = sys.argv[2:]
mark = {}
for i, text in enumerate(open(os.path.join(suite, "test_gpu.py")), 1):
    if "# L:" in text:
        mark[text.split("# L:")[1].strip()] = i

junit = os.path.join(out, "junit%s.xml" % ("-xdist" if extra else ""))
shm = os.environ["SYNCSPY_DIR"]
before = set(os.listdir(shm))
cmd = [sys.executable, "-m", "pytest", "--syncspy", "-p", "no:cacheprovider", "-rf",
       "--junitxml", junit, suite] + extra
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=out)
text = p.stdout.decode()
print(text)
assert p.returncode == 1, "exit %d" % p.returncode
assert "1 failed, 11 passed" in text, "expected 1 failed, 11 passed"
want = "test_gpu.py:%d cudaStreamSynchronize x2" % mark["over"]
assert "syncspy: 2 host stalls (stream_sync), at most 0 allowed" in text
assert want in text, want
# The session report lists every test's stalls.
assert "syncspy: host stalls per test" in text
assert "test_unmarked_reported: 1 stall, " in text, "one stall, singular"
assert "test_within_budget: 3 stalls" in text
assert "11 tests with stalls, 1 without" in text, "per-test summary"

cases = {c.get("name"): c for c in ET.parse(junit).iter("testcase")}
props = {
    name: {p.get("name"): p.get("value") for p in c.iter("property")} for name, c in cases.items()
}
assert props["test_clean"]["syncspy_stalls"] == "0", props["test_clean"]
assert props["test_over_budget"]["syncspy_stalls"] == "2", props["test_over_budget"]
assert want in props["test_over_budget"]["syncspy_sites"]
w = "test_gpu.py:%d cudaStreamSynchronize x3" % mark["within"]
assert props["test_within_budget"]["syncspy_sites"] == w, props["test_within_budget"]
assert cases["test_over_budget"].find("failure") is not None
# The marker takes every host-stall kind of the installed package (poll_wait and host_wait
# included), and counts only those.
for name in ("test_host_wait_kind", "test_poll_wait_kind", "test_new_kinds_in_a_dict"):
    assert cases[name].find("failure") is None, name
    assert cases[name].find("error") is None, name
    assert props[name]["syncspy_stalls"] == "1", props[name]
# Each process that ran tests recorded into a segment of its own (xdist: one per worker).
pids = {n.split("-")[1] for n in set(os.listdir(shm)) - before if n.startswith("syncspy-")}
if extra:
    assert "2 workers [12 items]" in text, "xdist did not start 2 workers"
    assert len(pids) == 2, pids
else:
    assert len(pids) == 1, pids
if not extra:
    # A kind the package does not know, or one that is no host stall, is refused by name.
    refused = os.path.join(out, "refused")
    os.makedirs(refused, exist_ok=True)
    with open(os.path.join(refused, "test_refused.py"), "w") as f:
        f.write(
            "import pytest\n\n"
            "@pytest.mark.syncspy(kinds=['tensor_sync'])\n"
            "def test_unknown():\n    pass\n\n"
            "@pytest.mark.syncspy(max_stalls={'gpu_idle': 0})\n"
            "def test_not_a_stall():\n    pass\n"
        )
    cmd = [sys.executable, "-m", "pytest", "--syncspy", "-p", "no:cacheprovider", refused]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=out)
    text = p.stdout.decode()
    print(text)
    assert p.returncode == 1, "exit %d" % p.returncode
    assert "2 failed" in text, "expected 2 failed"
    assert "unknown kind 'tensor_sync' (kinds: device_sync, stream_sync" in text
    assert "not a host stall, so never counted: 'gpu_idle'" in text
    assert "poll_wait, host_wait)" in text, "the package's kinds"
print("check_pytest%s: ok" % (" " + " ".join(extra) if extra else ""))
