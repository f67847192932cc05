"""Two processes on one GPU: runs launch_heavy.py twice at once (arguments passed on) and
prints one ground-truth line with the slower process's loop time and both processes' counts."""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
cmd = [sys.executable, os.path.join(here, "launch_heavy.py")] + sys.argv[1:]
procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
lines = []
for p in procs:
    out, _ = p.communicate()
    truth = [l for l in out.splitlines() if l.startswith("{")]
    lines.append(json.loads(truth[-1]) if truth and p.returncode == 0 else None)
ok = all(lines)
print(json.dumps({"scenario": "two-procs", "pid": os.getpid(),
                  "args": lines[0]["args"] if ok else {},
                  "ops": {"item": sum(l["ops"]["item"] for l in lines)} if ok else {},
                  "gpu_ms": {}, "wall_ms": {"loop": max(l["wall_ms"]["loop"] for l in lines)} if ok else {},
                  "checks": {"both": ok}, "ok": ok}), flush=True)
sys.exit(0 if ok else 1)
