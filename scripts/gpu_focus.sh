#!/usr/bin/env bash
# Focused GPU checks (a subset of gpu_check.sh for short leases): repeated signal/ordering
# stress at 4 PEs, the heap timing run with its debug breakdown, and compute-sanitizer on small
# device-API cases at 2 PEs. Logs under $OUT (or results/<time>/).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export GSHMEM_CUDA_ARCHS="${GSHMEM_CUDA_ARCHS:-90}" CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-/tmp/gshmem-cupy}"
PY="${PYTHON:-python3}"
R="${OUT:-results/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$R"
$PY -m pip install -q --no-build-isolation --no-deps -e . >"$R/build.log" 2>&1 || { tail -30 "$R/build.log"; exit 1; }
N=$($PY -c 'import gshmem; print(gshmem.device_count())')
for i in $(seq "${REPEATS:-2}"); do
  timeout 200 $PY -m gshmem.run -n "$N" --timeout 190 tests/gpu/scripts/device_api_check.py signal order >>"$R/stress.log" 2>&1
  echo "signal+order at $N PEs, run $i: rc=$? ($(grep -c PASS "$R/stress.log") PASS lines so far)"
done
GSHMEM_DEBUG=1 timeout 100 $PY -m gshmem.run -n "$N" --timeout 90 tests/gpu/scripts/heap_check.py timing >"$R/timing.log" 2>&1
echo "timing rc=$?"; grep -h "TIMING\|grew by 770\|grew by 1024" "$R/timing.log" | head -12
for tool in memcheck racecheck; do
  GSHMEM_TEST_SMALL=1 timeout 170 $PY -m gshmem.run -n 2 --timeout 160 \
    --wrap "compute-sanitizer --tool $tool --error-exitcode 99" \
    tests/gpu/scripts/device_api_check.py ${SANITIZER_SCENARIOS:-rma signal barrier amo} >"$R/sanitizer-$tool.log" 2>&1
  echo "compute-sanitizer $tool: rc=$?"; grep -h "ERROR SUMMARY\|PASS" "$R/sanitizer-$tool.log" | sort | uniq -c
done
