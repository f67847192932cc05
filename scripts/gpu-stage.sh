#!/usr/bin/env bash
# Builds the release artifacts and copies them into .gpu/ (git-ignored), which the device
# tool carries to the GPU machine; then run scripts/gpu-validate.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
rm -rf .gpu && mkdir -p .gpu
cp target/release/{syncspy,libsyncspy.so,cudacalls,cudacalls-dlopen} .gpu/
cp "$(ls -t target/release/build/syncspy-scenarios-*/out/libcudacaller.so | head -1)" .gpu/
# Criterion benchmark binaries (hook fast path, ring write).
for b in hooks ring; do
  exe=$(cargo bench --no-run --bench "$b" --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["kind"]==["bench"] and m.get("executable"): print(m["executable"])' | tail -1)
  cp "$exe" ".gpu/bench-$b" && strip ".gpu/bench-$b"
done
du -sh .gpu
