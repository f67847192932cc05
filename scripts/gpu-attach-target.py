#!/usr/bin/env python3
"""`syncspy attach` against the real CUDA runtime and driver: the CI's attach target
(scenarios/src/attach_target.c) built on a GPU host three ways (lazy binding, BIND_NOW with full
RELRO, -fno-plt) against libcudart.so.13 and libcuda.so.1, attached to twice each.

The target makes exactly the calls it is told on stdin, so what happened while attached is
known: runtime syncs, copies, device syncs, the driver's cuStreamSynchronize through its import
and through a pointer dlsym hands out while attached. Checked per build and attach: the report's
counts equal the calls made while attached; GPU idle tracing ran (mode on, activity measured);
after detach the import slots hold their original bytes (read through /proc/PID/mem) and no
syncspy thread is left; the target's vector registers, MXCSR and stack are as they were (it
exits 99 otherwise) and its exit code is the one asked for.

    python3 scripts/gpu-attach-target.py SYNCSPY_BIN_DIR CUDA_LIB_DIR RESULTS_DIR

Prints a Markdown table; exits 1 if a check failed.
"""
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILDS = {
    "lazy": ["-Wl,-z,lazy", "-Wl,-z,relro"],
    "now": ["-Wl,-z,now", "-Wl,-z,relro"],
    "noplt": ["-fno-plt", "-Wl,-z,now", "-Wl,-z,relro"],
}
# While attached: command -> (API in the report, calls).
WHILE = [
    ("sync 7", "cudaStreamSynchronize", 7),
    ("memcpy 3", "cudaMemcpy", 3),
    ("devsync 2", "cudaDeviceSynchronize", 2),
    ("drv 3", "cuStreamSynchronize", 3),
    ("dsym 4", "cuStreamSynchronize", 4),
]


def lines_of(stream):
    q = queue.Queue()

    def pump():
        for line in stream:
            q.put(line.rstrip("\n"))
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


class Target:
    def __init__(self, exe, env):
        self.p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env)
        self.out = lines_of(self.p.stdout)
        ready = self.line()
        if not ready.startswith("ready"):
            raise RuntimeError(f"target: {ready!r}")

    def line(self):
        line = self.out.get(timeout=60)
        if line is None:
            raise RuntimeError(f"target ended: {self.p.wait()}")
        return line

    def cmd(self, c):
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()
        answer = self.line()
        if not answer.startswith("done"):
            raise RuntimeError(f"{c}: {answer!r}")
        return answer

    def slots(self):
        self.p.stdin.write("slots\n")
        self.p.stdin.flush()
        out = []
        while (line := self.line()) != "done slots":
            _, name, addr = line.split()
            out.append((name, int(addr, 16)))
        return out

    def got(self, slots):
        with open(f"/proc/{self.p.pid}/mem", "rb") as mem:
            vals = []
            for _, a in slots:
                mem.seek(a)
                vals.append(int.from_bytes(mem.read(8), "little"))
            return vals

    def threads(self):
        names = []
        for t in pathlib.Path(f"/proc/{self.p.pid}/task").iterdir():
            try:
                names.append((t / "comm").read_text().strip())
            except OSError:
                pass
        return names


def attach(bin_dir, pid, report, log):
    a = subprocess.Popen([str(bin_dir / "syncspy"), "attach", str(pid), "--report", str(report)],
                         stderr=subprocess.PIPE, text=True)
    err = lines_of(a.stderr)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            line = err.get(timeout=0.5)
        except queue.Empty:
            if a.poll() is not None:
                break
            continue
        if line is None:
            break
        log.append(line)
        if "attached to process" in line:
            return a, err
    a.kill()
    raise RuntimeError("attach did not attach:\n" + "\n".join(log))


def finish(a, err, log):
    a.send_signal(signal.SIGINT)
    rc = a.wait(timeout=60)
    while (line := err.get(timeout=10)) is not None:
        log.append(line)
    return rc


def main():
    bin_dir, cuda_lib, results = (pathlib.Path(p) for p in sys.argv[1:4])
    results.mkdir(parents=True, exist_ok=True)
    build = pathlib.Path(tempfile.mkdtemp())
    # libcuda.so for the linker: the driver installs libcuda.so.1.
    libcuda = subprocess.run(["sh", "-c", "ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}'"],
                             capture_output=True, text=True).stdout.strip()
    (build / "libcuda.so").symlink_to(libcuda or str(cuda_lib / "libcuda.so.1"))
    env = dict(os.environ, LD_LIBRARY_PATH=f"{cuda_lib}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    rows, failures = [], []
    for name, flags in BUILDS.items():
        exe = build / f"attach-target-{name}"
        subprocess.run(["gcc", "-O1", "-pthread", "-o", str(exe),
                        str(ROOT / "scenarios/src/attach_target.c"), *flags,
                        f"-L{cuda_lib}", f"-L{build}", "-lcudart", "-lcuda", "-ldl"], check=True)
        t = Target(str(exe), env)
        t.cmd("sync 5")
        t.cmd("drv 2")
        slots = t.slots()
        before = t.got(slots)
        for rnd in (1, 2):
            log = []
            report = results / f"{name}-{rnd}.json"
            a, err = attach(bin_dir, t.p.pid, report, log)
            # GPU tracing starts on a thread of its own once attached (CUPTI loads in a few
            # hundred ms): the calls below come after it.
            time.sleep(1.5)
            during = t.got(slots)
            redirected = sum(1 for b, d in zip(before, during) if b != d)
            t0 = time.time()
            for c, _, _ in WHILE:
                t.cmd(c)
            calls_s = time.time() - t0
            had_gpu_thread = "syncspy-gpu" in t.threads()
            time.sleep(0.8)
            rc = finish(a, err, log)
            (results / f"{name}-{rnd}.log").write_text("\n".join(log) + "\n")
            r = json.loads(report.read_text())
            p = r["processes"][0]
            want = {}
            for _, api, n in WHILE:
                want[api] = want.get(api, 0) + n
            got = {api: p["apis"].get(api, {}).get("count", 0) for api in want}
            gpu = p.get("gpu") or {}
            after = t.got(slots)
            names = t.threads()
            left = [n for n in names if n.startswith("syncspy")]
            cupti = sum(1 for n in names if n == "cupti")
            t.cmd("sync 4")
            checks = {
                "counts": got == want,
                "gpu traced": gpu.get("mode") == "on" and bool(gpu.get("measured"))
                and had_gpu_thread,
                "GOT restored": after == before,
                "no thread left": not left,
                "attach exit 0": rc == 0,
            }
            bad = [k for k, ok in checks.items() if not ok]
            if bad:
                failures.append(f"{name} round {rnd}: {bad}: want {want} got {got}; "
                                f"gpu {json.dumps(gpu)[:300]}; left {left}")
            causes = gpu.get("causes") or []
            top = causes[0]["location"] if causes and causes[0].get("location") else "-"
            rows.append(
                f"| {name} | {rnd} | {redirected}/{len(slots)} | "
                + ", ".join(f"{k} {got[k]}/{want[k]}" for k in want)
                + f" | {gpu.get('idle', {}).get('count', 0)} gaps, {gpu.get('records', 0)} records,"
                f" top cause {top}; CUPTI's threads after detach: {cupti}"
                f" | {'ok' if not bad else 'FAILED: ' + ', '.join(bad)} |")
        t.p.stdin.write("exit 7\n")
        t.p.stdin.flush()
        signals = t.line()
        code = t.p.wait(timeout=30)
        ok = code == 7
        if not ok:
            failures.append(f"{name}: exit {code} (99: vector registers or MXCSR changed)")
        rows.append(f"| {name} | exit | | asked 7, got {code}; {signals} | | "
                    f"{'ok' if ok else 'FAILED'} |")
    print("| build | attach | slots redirected | calls while attached: recorded/made | GPU idle "
          "while attached | checks |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    for f in failures:
        print(f"- FAILED {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
