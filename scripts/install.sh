#!/usr/bin/env bash
# Installs syncspy from this checkout: a release build, then
#   PREFIX/lib/syncspy/  syncspy, syncspy-top, libsyncspy.so, libsimcudart.so (the simulated
#                        CUDA runtime of `--sim`), and the scenario programs of `syncspy demo`
#                        (scn-*, cudacalls)
#   PREFIX/bin/          syncspy and syncspy-top, links into PREFIX/lib/syncspy
# `syncspy` looks for libsyncspy.so, libsimcudart.so, syncspy-top and the demo's programs in
# the folder of its own binary, with links resolved (cli/src/run.rs, `library_dirs`): that is
# why they live together in PREFIX/lib/syncspy and only links are on PATH.
#
#   scripts/install.sh                   # PREFIX = ~/.local
#   scripts/install.sh /usr/local        # as root: for every user
#   scripts/install.sh --no-build PREFIX # from target/release as already built
#   scripts/install.sh --from DIR PREFIX # from the binaries in DIR (CI: target/debug)
#
# Files are replaced by rename, so a running job that has the old libsyncspy.so loaded keeps
# it. Uninstall: rm -r PREFIX/lib/syncspy PREFIX/bin/syncspy PREFIX/bin/syncspy-top
set -euo pipefail
build=1
bin=
case "${1:-}" in
  --no-build)
    build=0
    shift
    ;;
  --from)
    build=0
    bin=${2:?"--from DIR"}
    shift 2
    ;;
esac
case "${1:-}" in
  -h | --help)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  -*)
    echo "usage: $0 [--no-build | --from DIR] [PREFIX]" >&2
    exit 2
    ;;
esac
# Paths given are taken from the caller's folder; the build runs in the checkout.
prefix=$(realpath -m "${1:-$HOME/.local}")
[[ -n "$bin" ]] && bin=$(realpath -m "$bin")
cd "$(dirname "$0")/.."
[[ -n "$bin" ]] || bin="${CARGO_TARGET_DIR:-target}/release"
case "$prefix" in
  *[[:space:]:]*)
    # LD_PRELOAD and LD_LIBRARY_PATH split on these: syncspy would refuse the library's path.
    echo "install.sh: $prefix contains a space or ':'; choose a plain path" >&2
    exit 2
    ;;
esac

if ((build)); then
  # The whole workspace, as the README's set-up builds it: after that this is a no-op.
  cargo build --release --locked --workspace
fi
files=(syncspy syncspy-top libsyncspy.so libsimcudart.so cudacalls)
for f in "$bin"/scn-*; do
  [[ -f "$f" && -x "$f" ]] && files+=("$(basename "$f")")
done
for f in "${files[@]}"; do
  [[ -f "$bin/$f" ]] || {
    echo "install.sh: $bin/$f is missing: build first (cargo build --release --workspace)" >&2
    exit 1
  }
done

lib="$prefix/lib/syncspy"
mkdir -p "$lib" "$prefix/bin"
# Debug information is most of the files' size: the tools' copies leave it out, as the wheel's
# do (the symbol tables stay); the demo's programs keep it compressed, so that their call
# sites are still named by file and line.
objcopy=$(command -v objcopy || true)
for f in "${files[@]}"; do
  # A new file renamed over the old one: a process that has the old one mapped keeps it.
  cp "$bin/$f" "$lib/.$f.new"
  if [[ -n "$objcopy" ]]; then
    case "$f" in
      syncspy | syncspy-top | lib*.so) "$objcopy" --strip-debug "$lib/.$f.new" ;;
      *) "$objcopy" --compress-debug-sections=zlib "$lib/.$f.new" ;;
    esac
  fi
  chmod 755 "$lib/.$f.new"
  mv -f "$lib/.$f.new" "$lib/$f"
done
for f in syncspy syncspy-top; do
  ln -sfn "../lib/syncspy/$f" "$prefix/bin/$f"
done

echo "installed in $lib: ${files[*]}"
echo "commands: $prefix/bin/syncspy, $prefix/bin/syncspy-top"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "note: $prefix/bin is not on PATH: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
