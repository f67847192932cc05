# Sourced (not run) by the scripts that run on a GPU host: gpu-validate.sh, gpu-scenarios.sh
# and gpu-monitor.sh. It makes RESULTS_DIR absolute and creates it, goes to the repository
# root, and unpacks .gpu/bundle.tar.xz when scripts/gpu-stage.sh left one.
#
#   . "$(dirname "$0")/gpu-host.sh" NAME      (default results folder: ./gpu-results/NAME)
#
# Settings, from the environment:
#   RESULTS_DIR  where the results go (default ./gpu-results/NAME, from the current folder)
#   PYTHON       the Python with PyTorch (default python3)
#   CUDA_HOME    the CUDA 13 toolkit, for nvcc and libcudart.so.13 (default
#                /usr/local/cuda-13.0); used by gpu_cuda_env only

RESULTS_DIR=${RESULTS_DIR:-gpu-results/$1}
mkdir -p "$RESULTS_DIR" || exit 2
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
PY=${PYTHON:-python3}
G=$PWD/.gpu
[ -f "$G/bundle.tar.xz" ] && tar xJf "$G/bundle.tar.xz" -C "$G"
if [ ! -x "$G/syncspy" ]; then
  echo "no $G/syncspy: run scripts/gpu-stage.sh on the development machine and copy .gpu/ here" >&2
  exit 2
fi

# nvcc on PATH and the toolkit's runtime first on the library path, for the C programs.
gpu_cuda_env() {
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0}
  export LD_LIBRARY_PATH=$CUDA_HOME/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
  export PATH=$CUDA_HOME/bin:$PATH
}
