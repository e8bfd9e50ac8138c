#!/usr/bin/env bash
# Build, test and exercise gshmem on a GPU host; logs and JSON go to $OUT (device machines) or
# results/<time>/, and a summary table is printed last.
#
#   bash scripts/gpu_check.sh            # build, the GPU tests, the quick benchmarks: fits one
#                                        # 10-minute call (2026-11-27, H200, with wheels/ so the
#                                        # proxy tests run: 512 s at 2 GPUs, tests 263 + 127 s;
#                                        # 546 s at 4 GPUs, tests 283 + 125 s; 521 s at 4 x H100
#                                        # with the proxy scenarios batched; 525 s at 4 x H200
#                                        # with the JAX bench step, in two calls; docs/results.md)
#   STEPS=all bash scripts/gpu_check.sh  # also the demos, the timing run and compute-sanitizer
#   STEPS="pytest demo" bash scripts/gpu_check.sh    # only these of: pytest demo timing bench sanitizer
#   PYTEST_ARGS="tests/gpu/test_heap.py" bash scripts/gpu_check.sh   # a subset of the tests
#   PYTEST_WORKERS=0 bash scripts/gpu_check.sh       # tests one at a time (default: 3 per GPU)
#   GSHMEM_TEST_WIDEST_PES=0 bash scripts/gpu_check.sh   # every PE count of each test (default:
#                                                    # the widest that fits, tests/pe_counts.py)
#   PYTEST_TIMEOUT=900 bash scripts/gpu_check.sh     # seconds for the shared test phase (450)
#   PYTEST_TEST_TIMEOUT=300 bash scripts/gpu_check.sh  # seconds for one test (240; needs the
#                                                    # pytest-timeout plugin, else no limit)
#   PYTEST_ALONE_GPUS=1 bash scripts/gpu_check.sh    # GPUs per gpu_alone test (default: 2 from
#                                                    # 4 GPUs on, so faults cross GPUs; else 1)
#   SANITIZER=0 STEPS=all bash scripts/gpu_check.sh  # everything but compute-sanitizer
#   wheels/*.whl                                     # installed before the build where present
#                                                    # (e.g. libucx-cu13: the proxy-path tests)
#
# The tests run in parallel where pytest-xdist is installed: first every test but those marked
# gpu_alone, several at once, each xdist worker seeing the GPUs rotated so that their PEs spread
# over all of them (groups marked xdist_group run in turn on one worker); then the gpu_alone ones
# (they measure the GPU: free memory, detection times), each on GPUs of its own
# (tests/gpu_placement.py). The CPU tests are not rerun here (PYTEST_ARGS=tests runs them too).
#
# NVLink multicast stays off in everything this starts (see shared/GPU.md).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
export GSHMEM_CUDA_ARCHS="${GSHMEM_CUDA_ARCHS:-90}"
PY="${PYTHON:-python3}"
RESULTS="${OUT:-results/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$RESULTS"
SUMMARY=()
declare -A STATUS
STEPS=" ${STEPS:-pytest bench} "
[ "$STEPS" = " all " ] && STEPS=" pytest demo timing bench sanitizer "
wanted() { [[ "$STEPS" == *" $1 "* ]]; }

# step NAME LOGFILE TIMEOUT CMD...: runs CMD under a timeout, appends to LOGFILE, records status.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local t0=$SECONDS
  echo "=== $name: $*" >>"$RESULTS/$log"
  timeout --kill-after=10 "$limit" "$@" >>"$RESULTS/$log" 2>&1
  local rc=$?
  local verdict=PASS
  [ $rc -eq 0 ] || verdict="FAIL(rc=$rc)"
  [ $rc -eq 124 ] && verdict="TIMEOUT"
  STATUS[$name]=$verdict
  SUMMARY+=("$(printf '%-22s %-12s %5ss  %s' "$name" "$verdict" "$((SECONDS - t0))" "$log")")
  return $rc
}

{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  nvidia-smi topo -m
  $PY -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "gpus", torch.cuda.device_count())'
} >"$RESULTS/build.log" 2>&1  # the machine first, then the build (at most 8 files under $OUT)

# Wheels an offline GPU host lacks (libucx-cu13 for the proxy path's tests) travel with the working
# tree in wheels/ (ignored by git); installed first, since the build looks for UCX's headers.
for wheel in wheels/*.whl; do
  [ -e "$wheel" ] && step "wheel-$(basename "$wheel" | cut -d- -f1)" build.log 300 $PY -m pip install --no-deps "$wheel"
done
step build build.log 900 $PY -m pip install --no-build-isolation --no-deps -e . || {
  tail -40 "$RESULTS/build.log"; printf '%s\n' "${SUMMARY[@]}"; exit 1; }

NGPU=$($PY -c 'import gshmem; print(gshmem.device_count())')
TESTS="${PYTEST_ARGS:-tests/gpu}"
# A test parametrised over PE counts runs at the widest that fits (tests/pe_counts.py): at 4 GPUs
# its 4-PE case; its 2-PE case is the 2-GPU check's.
export GSHMEM_TEST_WIDEST_PES="${GSHMEM_TEST_WIDEST_PES:-1}"
# One CuPy kernel cache for every test process, filled while the first tests run: the device-API,
# window and fault checks then load their NVRTC modules instead of each compiling them (~30 s).
export CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-$HOME/.cache/gshmem/cupy}"
wanted pytest && { $PY tests/gpu/scripts/warm_kernels.py >>"$RESULTS/build.log" 2>&1 & }
# Test processes mostly start, compile and initialise (CPU): 3 workers per GPU (at 2 GPUs, 4 left
# the run 40 s over its 10 minutes, 2026-11-27; at 4 GPUs, 8 left it past 575 s).
WORKERS="${PYTEST_WORKERS:-$((NGPU > 1 ? 3 * NGPU : 2))}"
$PY -c 'import xdist' 2>/dev/null || WORKERS=0
# A step killed by its limit dies before pytest's summary (2026-11-27, 2 GPUs: two `F`s, no names),
# so each failure is written out when it happens (tests/failures_at_once.py), and a test that
# hangs fails on its own with its stack rather than taking the step with it.
export GSHMEM_TEST_FAILURES_AT_ONCE="${GSHMEM_TEST_FAILURES_AT_ONCE:-1}"
PER_TEST=()
$PY -c 'import pytest_timeout' 2>/dev/null && PER_TEST=(--timeout "${PYTEST_TEST_TIMEOUT:-240}")
# has_tests MARKER: whether the selection holds tests with that marker expression
has_tests() { local listed; listed=$($PY -m pytest -q --collect-only -m "$1" $TESTS 2>/dev/null); [[ "$listed" == *::* ]]; }
if wanted pytest && [ "$WORKERS" = 0 ]; then
  step pytest tests.log "${PYTEST_TIMEOUT:-1500}" $PY -m pytest -q -rfEs --durations=25 \
    "${PER_TEST[@]}" $TESTS
elif wanted pytest; then
  if has_tests "not gpu_alone"; then
    step pytest tests.log "${PYTEST_TIMEOUT:-450}" env GSHMEM_TEST_ROTATE_GPUS=1 $PY -m pytest \
      -q -rfEs --durations=60 "${PER_TEST[@]}" -n "$WORKERS" --dist loadgroup -m "not gpu_alone" \
      $TESTS
  fi
  ALONE_GPUS="${PYTEST_ALONE_GPUS:-$((NGPU >= 4 ? 2 : 1))}"
  ALONE_WORKERS=$((NGPU / ALONE_GPUS > 0 ? NGPU / ALONE_GPUS : 1))
  if has_tests gpu_alone; then  # ~10-15 s a case, 19 cases shared by the workers
    step pytest-alone tests.log "${PYTEST_ALONE_TIMEOUT:-$((60 + 300 / ALONE_WORKERS))}" \
      env GSHMEM_TEST_PIN_GPU="$ALONE_GPUS" $PY -m pytest -q -rfEs --durations=10 \
      "${PER_TEST[@]}" -n "$ALONE_WORKERS" --max-worker-restart 0 -m gpu_alone $TESTS
  fi
fi
if wanted demo; then
step demo demo.log 300 $PY -m gshmem.demo
step demo-gshmem.run demo.log 300 $PY -m gshmem.run -n "$NGPU" --timeout 280 -m gshmem.demo
step demo-torchrun demo.log 300 torchrun --nproc_per_node "$NGPU" -m gshmem.demo
if command -v mpirun >/dev/null && $PY -c 'import mpi4py' 2>/dev/null; then
  step demo-mpirun demo.log 300 mpirun --allow-run-as-root --oversubscribe -n "$NGPU" \
    -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
    -x PYTHONUNBUFFERED $PY -m gshmem.demo
fi
fi
wanted timing && step timing timing.log 300 env GSHMEM_DEBUG=1 $PY -m gshmem.run -n "$NGPU" --timeout 280 tests/gpu/scripts/heap_check.py timing
wanted bench && step bench-p2p bench.log 200 $PY -m gshmem.bench p2p --np "$((NGPU >= 4 ? 4 : 2))" --quick \
  --compare "${BENCH_COMPARE:-copy_engine,nccl}" --timeout 180 --json "$RESULTS/bench_p2p.json"
wanted bench && [ "$NGPU" -ge 2 ] && step bench-coll bench.log 200 $PY -m gshmem.bench coll --np "$NGPU" --quick \
  --compare nccl,torch_symm --timeout 180 --json "$RESULTS/bench_coll.json"
# gshmem.jax's ppermute and psum against jax.lax's, both layouts, 64 B to 256 KiB: each size's values
# are checked before it is timed (a wrong value fails the step).
for layout in one per-gpu; do
  wanted bench && [ "$NGPU" -ge 2 ] && step "bench-jax-$layout" bench.log 200 $PY -m gshmem.bench jax \
    --layout "$layout" --np "$NGPU" --ops ppermute,psum -b 64 -e 256K -f 16 --timeout 180 \
    --json "$RESULTS/bench_jax_$layout.json"
done
# The attention bench's baselines (the NCCL ring, torch's CP, one GPU); the other schedules of
# gshmem's own (gshmem_ring, gshmem_heads) are left to the full bench.
# On a device machine ($OUT) at most 8 files come back: the plot is left outside $OUT, so that the
# logs and JSON (8 with the default steps) do.
PLOT=()
[ -n "${OUT:-}" ] && PLOT=(--plot "$(mktemp -d)/bench_attention.png")
wanted bench && [ "$NGPU" -ge 2 ] && step bench-attention bench.log 300 $PY -m gshmem.bench attention \
  --np "$NGPU" --quick --compare gshmem,nccl,torch_cp,ideal --timeout 280 \
  --json "$RESULTS/bench_attention.json" "${PLOT[@]}"
# Small cases of the device API under compute-sanitizer (memcheck, then racecheck), 2 PEs.
wanted sanitizer && [ "${SANITIZER:-1}" = 1 ] && for tool in memcheck racecheck; do
  step "sanitizer-$tool" sanitizer.log 280 env GSHMEM_TEST_SMALL=1 $PY -m gshmem.run -n 2 \
    --timeout 260 --wrap "compute-sanitizer --tool $tool --error-exitcode 99" \
    tests/gpu/scripts/device_api_check.py rma signal pg amo wait barrier
done
# The on-stream small-message kernels (and the copy-engine path around them) under memcheck.
wanted sanitizer && [ "${SANITIZER:-1}" = 1 ] && for scenario in rma graph; do
  step "sanitizer-stream-$scenario" sanitizer.log 200 env GSHMEM_STREAM_KERNEL_MAX_BYTES=65536 \
    $PY -m gshmem.run -n 2 --timeout 180 --wrap "compute-sanitizer --tool memcheck --error-exitcode 99" \
    tests/gpu/scripts/stream_check.py $scenario
done

echo
echo "gshmem GPU check: $NGPU GPU(s); logs in $RESULTS"
awk '/^=== /{phase=$2} / in [0-9.]+s( \(|=|$)/{last[phase]=$0}  # the last line of each phase
     END{for (p in last) print p, last[p]}' "$RESULTS/tests.log" 2>/dev/null
grep -sh -E '^(FAILED|ERROR) ' "$RESULTS/tests.log" | head -20  # pytest's short summary (-rfE)
grep -sh "init took" "$RESULTS/demo.log" | head -3
grep -sh 'TIMING' "$RESULTS/timing.log" | sed 's/^\[rank [0-9]*\] TIMING //'
grep -sh -A80 '^op ' "$RESULTS/bench.log" | head -60  # p2p
grep -sh -A40 ' algbw ' "$RESULTS/bench.log" | head -32  # collectives
grep -sh -E '^(ppermute|psum|values:) ' "$RESULTS/bench.log" | head -28  # jax
grep -sh -A30 '^gshmem ring attention' "$RESULTS/bench.log" | head -40  # attention
printf '%-22s %-12s %6s  %s\n' step status time log
printf '%s\n' "${SUMMARY[@]}"
for v in "${STATUS[@]}"; do [ "$v" = PASS ] || exit 1; done
