#!/usr/bin/env bash
# Build the CUDA backend on a GPU machine, run the GPU tests and the forward benchmark.
#
#   scripts/gpu_run.sh OUTDIR [quick|full]
#
#   quick: head dims 64/128/256, benchmark at seqlen 1k/4k/16k
#   full:  every head dim plus the tile-tuning variants (FLASHATTN_CUDA_TUNING), full benchmark
#          with every tiling timed
#
# Writes to OUTDIR: summary.txt (also printed), logs.tar.gz (env, build with ptxas register/spill
# lines, pytest, ctest, sanitizer and benchmark logs), h200-forward.csv/.png,
# h200-forward-tiles.csv (full), h200-ceilings.json: few files, because the device tool returns at
# most eight.
#   FLASHATTN_STEPS="build pytest ctest sanitize bench"   the steps to run (default: all)
# Needs third_party/cutlass (scripts/fetch_cutlass.sh).
#   FLASHATTN_PREBUILT_LIB=path/libflashattn.so  test and benchmark that library (built elsewhere with
#                                               the same mode) instead of building here, which saves
#                                               the device minutes of the build
#   FLASHATTN_BUILD_TOO=1                       with a prebuilt library: still build here, during
#                                               the tests, to record the build time
set -uo pipefail
out=${1:?usage: scripts/gpu_run.sh OUTDIR [quick|full]}
mode=${2:-full}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
steps=" ${FLASHATTN_STEPS:-build pytest ctest sanitize bench} "
logs=$out/logs
mkdir -p "$logs"
wants() { [[ $steps == *" $1 "* ]]; }
cd "$root"
export PYTHONUNBUFFERED=1

case $mode in
  quick) headdims="64;128;256"; tuning=OFF; bench_args=(--quick) ;;
  full) headdims="32;64;96;128;192;256"; tuning=ON; bench_args=(--tiles) ;;
  *) echo "mode must be quick or full" >&2; exit 2 ;;
esac

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  nvcc --version | tail -2
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  echo "mode=$mode headdims=$headdims tuning=$tuning cores=$(nproc)"
} > "$logs/env.txt" 2>&1

build() {
  local start=$SECONDS
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90 \
    -DFLASHATTN_HEADDIMS="$headdims" -DFLASHATTN_CUDA_TUNING=$tuning -DFLASHATTN_CUDA_VERBOSE_PTXAS=ON \
    -DFLASHATTN_BUILD_TESTS=$with_tests -DFLASHATTN_BUILD_TOOLS=ON ${gtest_flag} &&
  ninja -C build-gpu -j"$(nproc)" flashattn flashattn-cli $([[ $with_tests == ON ]] && echo backend_tests api_tests)
  local rc=$?
  echo "BUILD rc=$rc seconds=$((SECONDS - start)) headdims=$headdims tuning=$tuning cores=$(nproc)"
  return $rc
}

# Groups run as separate processes, so that a kernel fault (which kills the CUDA context) costs one
# group, not the whole run.
test_groups=("dense or long or deterministic" "head_dims" "window or softcap or alibi or gqa or scale or varlen or seqused or seqlen_k_zero or dropout or probs" "packed or view or misaligned or large_grid or errors or backward or malformed")
run_tests() {
  local timeout_flag=()
  python3 -c "import pytest_timeout" 2>/dev/null && timeout_flag=(--timeout=60)
  for group in "${test_groups[@]}"; do
    echo "=== pytest -k \"$group\""
    FLASHATTN_LIB=$1 timeout 240 python3 -m pytest -q -p no:cacheprovider -rf "${timeout_flag[@]}" tests/gpu -k "$group" 2>&1
  done
}

# The C++ GPU tests need GoogleTest; the device image has none, so it is carried in .gtest/.
with_tests=OFF; gtest_flag=
if [[ -d $root/.gtest ]]; then with_tests=ON; gtest_flag=-DGTEST_ROOT=$root/.gtest; fi
lib=$root/build-gpu/src/libflashattn.so
cli=$root/build-gpu/tools/cli/flashattn-cli
if [[ -n ${FLASHATTN_PREBUILT_LIB:-} && -f ${FLASHATTN_PREBUILT_LIB} ]]; then
  lib=$(realpath "$FLASHATTN_PREBUILT_LIB")
  echo "BUILD skipped: using prebuilt $lib" > "$logs/build.log"
elif wants build; then
  build > "$logs/build.log" 2>&1
fi

if wants pytest && [[ -f $lib ]]; then run_tests "$lib" > "$logs/tests.log" 2>&1; fi

# C++ suites: every CUDA case of the gtest binaries (label gpu), against the fp64 reference.
if wants ctest && [[ $with_tests == ON && -d build-gpu/tests ]]; then
  timeout 600 ctest --test-dir build-gpu -L gpu -j4 --output-on-failure > "$logs/ctest.log" 2>&1
fi

# compute-sanitizer on a small grid of CLI problems (plain, causal ragged, GQA varlen, extras).
sanitize_cases=(
  "--seqlen-q 113 --seqlen-k 203 --head-dim 64 --heads 2 --batch 2"
  "--seqlen-q 128 --seqlen-k 217 --head-dim 128 --causal --dtype fp16"
  "--varlen --seqlen 200 --heads 4 --kv-heads 2 --head-dim 96 --window 32,8"
  "--seqlen 130 --head-dim 256 --softcap 30 --alibi --dropout 0.1"
  "--seqlen 77 --head-dim 32 --causal --backward"
)
if wants sanitize && [[ -x $cli ]] && command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck; do
    for c in "${sanitize_cases[@]}"; do
      echo "=== $tool: $c"
      # shellcheck disable=SC2086
      timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$cli" --backend cuda --iters 1 --warmup 0 $c 2>&1 | tail -6
      echo "rc=${PIPESTATUS[0]}"
    done
  done > "$logs/sanitize.log" 2>&1
fi

if wants bench && [[ -f $lib ]]; then
  FLASHATTN_LIB=$lib timeout ${FLASHATTN_BENCH_TIMEOUT:-900} python3 bench/gpu_forward.py --out "$out" "${bench_args[@]}" > "$logs/bench.log" 2>&1
fi

{
  build_line=$(grep -hE '^BUILD ' "$logs/build.log" 2>/dev/null | tail -1)
  echo "== summary ($mode; steps:$steps) =="
  echo "${build_line:-no build line}"
  grep -hE " error|FAILED" "$logs/build.log" 2>/dev/null | head -5
  grep -hE "spill stores" "$logs/build.log" 2>/dev/null | sort | uniq -c | sort -rn | head -4
  grep -hE '^=== |(passed|failed|error).* in [0-9.]+s' "$logs/tests.log" 2>/dev/null
  grep -hE '^FAILED|^ERROR' "$logs/tests.log" 2>/dev/null | head -20
  grep -hE 'tests passed|tests failed|\(Failed\)|\(Timeout\)' "$logs/ctest.log" 2>/dev/null | head -20
  grep -hE '^===|ERROR SUMMARY|^rc=' "$logs/sanitize.log" 2>/dev/null
  sed -n '/^forward TFLOP/,$p' "$logs/bench.log" 2>/dev/null
} | tee "$out/summary.txt"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
