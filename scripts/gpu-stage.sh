#!/usr/bin/env bash
# Builds the release artifacts and copies them into .gpu/ (git-ignored), which the device
# tool carries to the GPU machine; then run scripts/gpu-validate.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
rm -rf .gpu && mkdir -p .gpu
cp target/release/{syncspy,syncspy-top,libsyncspy.so,libsimcudart.so,cudacalls,cudacalls-dlopen} .gpu/
# The scenario programs (their kernels' PTX is compiled into them) and the manifest checker.
cp target/release/scn-* target/release/scenario-check .gpu/
rm -f .gpu/*.d
cp "$(ls -t target/release/build/syncspy-scenarios-*/out/libcudacaller.so | head -1)" .gpu/
# The device tool carries at most 64 MiB: PACK=1 leaves one xz archive instead, which
# scripts/gpu-scenarios.sh unpacks there (debug line tables compress well).
pack() {
  if [ "${PACK:-0}" = 1 ]; then
    tar cJf /tmp/syncspy-gpu-bundle.tar.xz -C .gpu .
    rm -rf .gpu && mkdir .gpu && mv /tmp/syncspy-gpu-bundle.tar.xz .gpu/bundle.tar.xz
  fi
  du -sh .gpu
}
# Criterion benchmark binaries (hook fast path, ring write); SKIP_BENCH=1 leaves them out.
[ "${SKIP_BENCH:-0}" = 1 ] && { pack; exit 0; }
for b in hooks ring; do
  exe=$(cargo bench --no-run --bench "$b" --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["kind"]==["bench"] and m.get("executable"): print(m["executable"])' | tail -1)
  cp "$exe" ".gpu/bench-$b" && strip ".gpu/bench-$b"
done
pack
