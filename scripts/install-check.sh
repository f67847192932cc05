#!/usr/bin/env bash
# CI check of scripts/install.sh and of the README's commands after it (called by .ci/run after
# the test command): installs the binaries already built into ~/.local of a throwaway HOME, as
# the README's quick start does, puts ~/.local/bin first on PATH, then runs the README's block
# of "Trying it without a GPU" as written (`syncspy demo` on the simulated runtime, and
# `syncspy run --sim` of an installed scenario program), and the monitor from PATH.
# Usage: scripts/install-check.sh [TARGET_DIR/debug]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$(realpath "${1:-${CARGO_TARGET_DIR:-target}/debug}")
work=$(mktemp -d "${TMPDIR:-/tmp}/syncspy-install.XXXXXX")
trap 'rm -rf "$work"' EXIT

export HOME="$work/home" SYNCSPY_DIR="$work/shm"
mkdir -p "$HOME" "$SYNCSPY_DIR"
export PATH="$HOME/.local/bin:$PATH"
unset LD_PRELOAD LD_LIBRARY_PATH SYNCSPY_LIB SYNCSPY_SIM_LIB
scripts/install.sh --from "$bin" >"$work/install.txt"
[[ "$(command -v syncspy)" == "$HOME/.local/bin/syncspy" ]] || {
  cat "$work/install.txt"
  echo "syncspy on PATH: $(command -v syncspy)" >&2
  exit 1
}

# The README's block that starts with `syncspy demo`, run as written in an empty folder.
python3 - "$root/README.md" >"$work/block.sh" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
fences = [i for i, line in enumerate(lines) if line.startswith("```")]
blocks = ["\n".join(lines[a + 1 : b]) for a, b in zip(fences[::2], fences[1::2])]
print([b for b in blocks if b.startswith("syncspy demo")][0])
PY
mkdir "$work/run"
(cd "$work/run" && bash -euo pipefail "$work/block.sh") >"$work/out.txt" 2>&1 || {
  cat "$work/block.sh" "$work/out.txt"
  exit 1
}
for want in \
  "syncspy demo: the same work, the stalling way and the healthy way" \
  "pinned-double-buffer     healthy" \
  "scn-item-in-loop --iters 50\` exited with code 0" \
  "scn_item_in_loop.rs:45)"; do
  grep -qF -- "$want" "$work/out.txt" || {
    cat "$work/block.sh" "$work/out.txt"
    echo "install-check: the README's block printed no '$want'" >&2
    exit 1
  }
done

# The monitor from PATH, and through `syncspy top` (found beside syncspy's binary).
syncspy-top --print --after 1 --size 80x12 | grep -q "^syncspy-top "
syncspy top --print --after 1 --size 80x12 | grep -q "^syncspy-top "
echo "install-check: ok"
