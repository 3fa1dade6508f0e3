#!/usr/bin/env bash
# Build the CUDA backend on a GPU machine, run the GPU tests and the forward benchmark.
#
#   scripts/gpu_run.sh OUTDIR [quick|full]
#
#   quick: head dims 64/128/256, benchmark at seqlen 1k/4k/16k
#   full:  every head dim plus the tile-tuning variants (FLASHATTN_CUDA_TUNING), full benchmark
#          with every tiling timed
#
# Writes to OUTDIR: env.txt, build.log (with ptxas register/spill lines), tests.log, bench.log,
# h200-forward.csv/.png, h200-forward-tiles.csv (full), h200-ceilings.json. Prints a summary last.
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
} > "$out/env.txt" 2>&1

build() {
  local start=$SECONDS
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90 \
    -DFLASHATTN_HEADDIMS="$headdims" -DFLASHATTN_CUDA_TUNING=$tuning -DFLASHATTN_CUDA_VERBOSE_PTXAS=ON \
    -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_TOOLS=OFF &&
  ninja -C build-gpu -j"$(nproc)" flashattn
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

lib=$root/build-gpu/src/libflashattn.so
if [[ -n ${FLASHATTN_PREBUILT_LIB:-} && -f ${FLASHATTN_PREBUILT_LIB} ]]; then
  lib=$(realpath "$FLASHATTN_PREBUILT_LIB")
  if [[ ${FLASHATTN_BUILD_TOO:-0} == 1 ]]; then
    # Niced and never waited for: it only records how long the build takes on this machine.
    (export -f build; export headdims tuning; nice -n 19 bash -c build > "$out/build.log" 2>&1) &
    run_tests "$lib" > "$out/tests.log" 2>&1
  else
    echo "BUILD skipped: using prebuilt $lib" > "$out/build.log"
    run_tests "$lib" > "$out/tests.log" 2>&1
  fi
else
  build > "$out/build.log" 2>&1
  run_tests "$lib" > "$out/tests.log" 2>&1
fi
build_line=$(grep -E '^BUILD ' "$out/build.log" | tail -1)

if [[ -f $lib ]]; then
  FLASHATTN_LIB=$lib timeout ${FLASHATTN_BENCH_TIMEOUT:-900} python3 bench/gpu_forward.py --out "$out" "${bench_args[@]}" > "$out/bench.log" 2>&1
else
  echo "no library was built; see build.log" > "$out/bench.log"
fi

build_line=$(grep -E '^BUILD ' "$out/build.log" | tail -1)
[[ -z $build_line ]] && build_line="BUILD still running after $SECONDS s of this script ($(grep -c 'Compiling entry' "$out/build.log") kernels compiled)"
echo "== summary ($mode) =="
echo "$build_line"
grep -E "error|FAILED" "$out/build.log" | head -5
grep -E "spill stores" "$out/build.log" | sort | uniq -c | sort -rn | head -4
grep -E '^=== |(passed|failed|error).* in [0-9.]+s' "$out/tests.log"
grep -E '^FAILED|^ERROR' "$out/tests.log" | head -20
sed -n '/^forward TFLOP/,$p' "$out/bench.log"
