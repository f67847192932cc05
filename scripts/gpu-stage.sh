#!/usr/bin/env bash
# Builds the release artifacts on the development machine (Rust and a C compiler needed) and
# copies them into .gpu/ (git-ignored). To validate on a GPU host, copy the repository with
# its .gpu/ folder there (target/ and .git/ are not needed), then run, from the repository
# root on the host, scripts/gpu-validate.sh, scripts/gpu-scenarios.sh or
# scripts/gpu-monitor.sh. docs/gpu-validation.md says what each one checks.
#
#   [SKIP_BENCH=1] [PACK=1] scripts/gpu-stage.sh
#
# SKIP_BENCH=1 leaves out the criterion benchmark binaries (only gpu-validate.sh runs them).
# PACK=1 leaves one xz archive, .gpu/bundle.tar.xz, instead of the loose files (11 MiB in the
# recorded runs: the debug line tables compress well), for a slow or size-limited copy; the
# GPU scripts unpack it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
rm -rf .gpu && mkdir -p .gpu
cp target/release/{syncspy,syncspy-top,libsyncspy.so,libsimcudart.so,cudacalls,cudacalls-dlopen,drivercalls} .gpu/
# The scenario programs (their kernels' PTX is compiled into them) and the manifest checker.
cp target/release/scn-* target/release/scenario-check .gpu/
rm -f .gpu/*.d
cp "$(ls -t target/release/build/syncspy-scenarios-*/out/libcudacaller.so | head -1)" .gpu/
pack() {
  if [ "${PACK:-0}" = 1 ]; then
    tar cJf /tmp/syncspy-gpu-bundle.tar.xz -C .gpu .
    rm -rf .gpu && mkdir .gpu && mv /tmp/syncspy-gpu-bundle.tar.xz .gpu/bundle.tar.xz
  fi
  du -sh .gpu
}
# Criterion benchmark binaries (hook fast path, ring write).
[ "${SKIP_BENCH:-0}" = 1 ] && { pack; exit 0; }
for b in hooks ring python; do
  exe=$(cargo bench --no-run --bench "$b" --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["kind"]==["bench"] and m.get("executable"): print(m["executable"])' | tail -1)
  cp "$exe" ".gpu/bench-$b" && strip ".gpu/bench-$b"
done
pack
