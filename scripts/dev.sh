#!/usr/bin/env bash
# The two things a newcomer does, each in one command (installs what is missing first):
#   bash scripts/dev.sh demo   # build gshmem and run the main job (needs GPUs)
#   bash scripts/dev.sh test   # build gshmem and run every test this machine can run
# Offline GPU hosts already have every dependency; nothing is downloaded there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

has() { "$PY" -c "import $1" 2>/dev/null; }

install() {
  local want=() mod
  declare -A pkg=([nanobind]=nanobind [scikit_build_core]=scikit-build-core [numpy]=numpy
                  [pytest]=pytest [hypothesis]=hypothesis [ruff]=ruff [matplotlib]=matplotlib)
  # matplotlib: the attention bench's plot, drawn in a CPU test
  for mod in nanobind scikit_build_core numpy ${1:+pytest hypothesis ruff matplotlib}; do
    has "$mod" || want+=("${pkg[$mod]}")
  done
  has torch || want+=("torch==2.13.0")      # the CPU wheel where there is no GPU stack
  if [ -n "${1:-}" ]; then
    has jax || want+=(jax jaxlib)  # tests of the jax.distributed adapter
    has transformers || want+=("transformers>=5")  # gshmem.attention.hf against a real model
    # NVRTC compiles the device API in CPU tests (no GPU needed): the toolkit's or the wheel's.
    "$PY" - <<'PYEOF' || want+=("nvidia-cuda-nvrtc==13.0.*")
import glob, os, sys
hits = [glob.glob(os.path.join(p, "nvidia", "cu13", "lib", "libnvrtc.so*")) for p in sys.path if p]
sys.exit(0 if any(hits) or glob.glob("/usr/local/cuda/lib64/libnvrtc.so*") else 1)
PYEOF
  fi
  if [ ${#want[@]} -gt 0 ]; then "$PY" -m pip install -q "${want[@]}"; fi
  # UCX for the proxy path's network engine (its headers at build time, libucp at run time).
  # Optional: where no registry is reachable (offline GPU hosts) its tests skip.
  if [ -n "${1:-}" ] && ! has libucx; then
    "$PY" -m pip install -q "libucx-cu13==1.22.*" ||
      echo "dev.sh: libucx-cu13 could not be installed; the network-engine tests will skip" >&2
  fi
  "$PY" -m pip install -q --no-build-isolation --no-deps -e .
}

case "${1:-}" in
  demo)
    install
    exec "$PY" -m gshmem.demo
    ;;
  test)
    # One GPU architecture keeps the build short on 2-core CI machines.
    export GSHMEM_CUDA_ARCHS="${GSHMEM_CUDA_ARCHS:-90}"
    install test
    exec "$PY" -m pytest -q
    ;;
  *)
    echo "usage: bash scripts/dev.sh demo|test" >&2
    exit 2
    ;;
esac
