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
# h200-forward-tiles.csv and h200-backward-tiles.csv (full), h200-ceilings.json: few files, because the device tool returns at
# most eight.
#   FLASHATTN_DEADLINE_S=N   stop every step by N seconds after the start (default 3600)
#   FLASHATTN_TUNING=1       quick mode plus the tuning variants (built and timed with --tiles)
#   FLASHATTN_BENCH_GRID=full  quick mode's build, the forward/backward benchmarks' whole seqlen grid
#   FLASHATTN_SANITIZE_MAX=N   compute-sanitizer on the first N problems of each list only
#   FLASHATTN_BENCH_ARGS / FLASHATTN_DECODE_BENCH_ARGS   extra arguments of gpu_forward.py / gpu_decode.py
#   FLASHATTN_COMMIT=hash    the commit the benchmark files name (pass it: the device machine's copy
#                            of .git can be stale)
#   FLASHATTN_STEPS="build pytest pytest_sm80 pytest_sm90 ctest sanitize bench pytest_bwd sanitize_bwd bench_bwd decode"
#                                               (also: pytest_python, pip_python (carry .whl:
#                                               scripts/fetch_wheels.sh), profile = Nsight Compute,
#                                               decode_split_keys, profile_decode, decode_timeline, profile_bwd, pytest_sm90_forms,
#                                               decode_alt (A/B builds: FLASHATTN_ALT_DEFINES, see below),
#                                               bwd_timeline (a measuring build: bench/bwd_timeline.py),
#                                               pytest_bwd_sm80 / pytest_bwd_sm90 = the
#                                               Hopper backward forced, see below)
#                                               the steps to run (default: all)
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
steps=" ${FLASHATTN_STEPS:-build pytest pytest_sm80 pytest_sm90 ctest sanitize bench pytest_bwd sanitize_bwd bench_bwd decode} "
logs=$out/logs
mkdir -p "$logs"
wants() { [[ $steps == *" $1 "* ]]; }
# FLASHATTN_DEADLINE_S: the whole script's time budget (default 3600 s). Every step's timeout is cut
# to what is left (minus a margin for the summary), so the summary and the archive are always
# written before an outer time limit strikes.
deadline=${FLASHATTN_DEADLINE_S:-3600}
cap() { local left=$((deadline - SECONDS - 15)); ((left < 1)) && left=1; echo $(($1 < left ? $1 : left)); }
cd "$root"
export PYTHONUNBUFFERED=1

case $mode in
  quick) headdims="64;128;256"; tuning=OFF; bench_args=(--quick) ;;
  full) headdims="32;64;96;128;192;256"; tuning=ON; bench_args=(--tiles) ;;
  *) echo "mode must be quick or full" >&2; exit 2 ;;
esac
# FLASHATTN_BUILD_HEADDIMS: the main build's head dims instead of the mode's (e.g. "128" for a
# decode-only call: the decode benchmark is d128).
headdims=${FLASHATTN_BUILD_HEADDIMS:-$headdims}
# FLASHATTN_TUNING=1 with quick: the tile-tuning variants too (built, and timed by both benchmarks'
# --tiles), on quick's head dims and seqlens: a sweep that fits one device call.
if [[ ${FLASHATTN_TUNING:-0} == 1 && $mode == quick ]]; then tuning=ON; bench_args+=(--tiles); fi
# FLASHATTN_BENCH_GRID=full with quick: quick's build, the benchmarks' whole seqlen grid (512..16k).
if [[ ${FLASHATTN_BENCH_GRID:-} == full && $mode == quick ]]; then
  kept=(); for a in "${bench_args[@]}"; do [[ $a == --quick ]] || kept+=("$a"); done; bench_args=("${kept[@]}")
fi

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
    -DFLASHATTN_BUILD_TESTS=$with_tests -DFLASHATTN_BUILD_TOOLS=ON -DFLASHATTN_BUILD_EXAMPLES=OFF ${gtest_flag} &&
  ninja -C build-gpu -j"$(nproc)" flashattn flashattn-cli $([[ $with_tests == ON ]] && echo backend_tests api_tests inference_tests)
  local rc=$?
  echo "BUILD rc=$rc seconds=$((SECONDS - start)) headdims=$headdims tuning=$tuning cores=$(nproc)"
  return $rc
}

# pytest_groups LABEL FILE TIMEOUT GROUP...: each -k group of tests/gpu/FILE in its own process, so
# that a kernel fault (which kills the CUDA context) costs one group, not the whole run.
pytest_groups() {
  local label=$1 file=$2 limit=$3 group
  shift 3
  for group in "$@"; do
    echo "=== pytest $label-k \"$group\""
    FLASHATTN_LIB=$lib timeout $(cap "$limit") python3 -m pytest -q -p no:cacheprovider -rf "tests/gpu/$file" -k "$group" 2>&1
  done
}
# sanitize EXTRA_FLAGS CASE...: memcheck and racecheck over CLI problems.
# FLASHATTN_SANITIZE_MAX=N: only the first N problems of each list (short device calls).
sanitize() {
  local extra=$1 tool c
  shift
  (($# > ${FLASHATTN_SANITIZE_MAX:-99})) && set -- "${@:1:${FLASHATTN_SANITIZE_MAX}}"
  for tool in memcheck racecheck; do
    for c in "$@"; do
      echo "=== $tool: $c"
      # shellcheck disable=SC2086
      timeout $(cap 300) compute-sanitizer --tool $tool --error-exitcode 9 "$cli" --backend cuda $extra --iters 1 --warmup 0 $c 2>&1 | tail -6
      echo "rc=${PIPESTATUS[0]}"
    done
  done
}
can_sanitize() { [[ -x $cli ]] && command -v compute-sanitizer > /dev/null; }
test_groups=("dense or long or deterministic" "head_dims" "window or softcap or alibi or gqa or scale or varlen or seqused or seqlen_k_zero or dropout or probs" "packed or view or misaligned or large_grid or errors or backward or malformed")
run_tests() { pytest_groups "" test_forward.py 240 "${test_groups[@]}"; }

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

# The Hopper forward waits on mbarriers: a protocol (or register-split) error hangs rather than
# fails, and session 4's run 5 lost its whole call that way. So one problem that reaches it runs
# first under a 60 s timeout, and the suite runs only if it finished.
if wants pytest && [[ -f $lib ]]; then
  if [[ ! -x $cli ]] || timeout $(cap 60) "$cli" --backend cuda --seqlen 1024 --head-dim 128 --heads 4 --batch 2 \
       --causal --check --iters 1 --warmup 0 > "$logs/tests.log" 2>&1; then
    run_tests "$lib" >> "$logs/tests.log" 2>&1
  else
    echo "=== forward smoke problem failed or hung (rc=$?): forward suite skipped" >> "$logs/tests.log"
  fi
fi
# On Hopper the library runs the wgmma kernel (kernels/fwd_kernel_sm90.cuh) except on short d <= 64
# problems (use_sm90_kernel); each kernel gets the same tests forced: the portable mma.sync kernel
# is what sm_80/sm_89 GPUs run.
if wants pytest_sm80 && [[ -f $lib ]]; then
  echo "=== the SM80 kernel (FLASHATTN_CUDA_FWD_KERNEL=sm80)" >> "$logs/tests.log"
  FLASHATTN_CUDA_FWD_KERNEL=sm80 run_tests "$lib" >> "$logs/tests.log" 2>&1
fi
if wants pytest_sm90 && [[ -f $lib ]]; then
  echo "=== the SM90 kernel (FLASHATTN_CUDA_FWD_KERNEL=sm90)" >> "$logs/tests.log"
  FLASHATTN_CUDA_FWD_KERNEL=sm90 run_tests "$lib" >> "$logs/tests.log" 2>&1
fi
# Step pytest_sm90_forms (not in the default list): the Hopper kernel's two forms and grids forced
# onto every problem (kernels/fwd_launch_sm90.cuh): persistent wherever compiled (masked problems
# included), and one CTA per tile (the one-tile form; the extras kernel's persistent form at d <= 128).
if wants pytest_sm90_forms && [[ -f $lib ]]; then
  for form in 1 0; do
    echo "=== the SM90 kernel, FLASHATTN_CUDA_SM90_PERSISTENT=$form" >> "$logs/tests.log"
    FLASHATTN_CUDA_FWD_KERNEL=sm90 FLASHATTN_CUDA_SM90_PERSISTENT=$form run_tests "$lib" >> "$logs/tests.log" 2>&1
  done
fi

# C++ suites: every CUDA case of the gtest binaries (label gpu), against the fp64 reference.
if wants ctest && [[ $with_tests == ON && -d build-gpu/tests ]]; then
  timeout $(cap 600) ctest --test-dir build-gpu -L gpu -j4 --output-on-failure > "$logs/ctest.log" 2>&1
fi

# compute-sanitizer on a small grid of CLI problems (plain, causal ragged, GQA varlen, extras).
sanitize_cases=(
  "--seqlen-q 128 --seqlen-k 217 --head-dim 128 --causal --dtype fp16"
  "--seqlen-q 113 --seqlen-k 203 --head-dim 64 --heads 2 --batch 2"
  "--varlen --seqlen 200 --heads 4 --kv-heads 2 --head-dim 96 --window 32,8"
  "--seqlen 130 --head-dim 256 --softcap 30 --alibi --dropout 0.1"
  "--seqlen 77 --head-dim 32 --causal --backward"
)
if wants sanitize && can_sanitize; then sanitize "" "${sanitize_cases[@]}" > "$logs/sanitize.log" 2>&1; fi

if wants bench && [[ -f $lib ]]; then
  FLASHATTN_LIB=$lib timeout $(cap ${FLASHATTN_BENCH_TIMEOUT:-900}) python3 bench/gpu_forward.py --out "$out" "${bench_args[@]}" ${FLASHATTN_BENCH_ARGS:-} > "$logs/bench.log" 2>&1
fi

# The Python package's suite (tests/python) on the GPU, against this build's library (no pip
# install: the package is imported from python/ and pointed at the library).
if wants pytest_python && [[ -f $lib ]]; then
  PYTHONPATH=$root/python FLASHATTN_LIBRARY=$lib timeout $(cap 420) python3 -m pytest -q -p no:cacheprovider -rf -x \
    tests/python > "$logs/tests_python.log" 2>&1
fi

# Step pip_python (not in the default list): what a user does, `pip install .` of this tree on the
# GPU machine (offline: build requirements and test dependencies from the carried .whl/ that
# scripts/fetch_wheels.sh fills; head dims and arch cut to this mode's), then the package's suite
# from tests/python against the installed package (no library override), with skip reasons.
# Logs: pip_install.log, tests_pip_python.log.
if wants pip_python; then
  ( # a subshell: the pip variables stay out of the other steps
    export PIP_NO_INDEX=1 PIP_FIND_LINKS=$root/.whl PIP_DISABLE_PIP_VERSION_CHECK=1
    python3 -m pip install -q "$root"/.whl/*.whl 2>&1 | tail -5
    # The whole pip output goes to pip_install_full.log; this log keeps its outline. If the isolated
    # build fails (its build environment also comes from .whl), the tail says why, and the install
    # is retried without isolation (scikit-build-core is installed above).
    pip_install() {
      local start=$SECONDS
      timeout $(cap 400) python3 -m pip install -v --no-deps "$@" -C cmake.define.FLASHATTN_HEADDIMS="$headdims" \
        -C cmake.define.FLASHATTN_CUDA_ARCHS=90 "$root" >> "$logs/pip_install_full.log" 2>&1
      local rc=$?
      grep -E "^(Successfully|ERROR|error)|Building|took" "$logs/pip_install_full.log" | tail -8
      echo "pip install $* . rc=$rc seconds=$((SECONDS - start))"
      ((rc == 0)) || tail -40 "$logs/pip_install_full.log"
      return $rc
    }
    pip_install || pip_install --no-build-isolation
  ) > "$logs/pip_install.log" 2>&1
  (cd tests/python && env -u FLASHATTN_LIBRARY timeout $(cap 420) python3 -m pytest -q -p no:cacheprovider -rsf . \
    > "$logs/tests_pip_python.log" 2>&1)
fi

# Nsight Compute over one call of each forward kernel (ours, torch FA2, cuDNN) on a few shapes
# (FLASHATTN_PROFILE_SHAPES, bench/profile_forward.py's names). Log: profile.log.
profile_shapes=(${FLASHATTN_PROFILE_SHAPES:-d64c1k d64n4k d128c1k d256c1k})
profile_impls=(${FLASHATTN_PROFILE_IMPLS:-ours_sm80 ours_sm90 fa2 cudnn})
if wants profile && [[ -f $lib ]] && command -v ncu > /dev/null; then
  nvtx=()
  for s in "${profile_shapes[@]}"; do for i in "${profile_impls[@]}"; do nvtx+=(--nvtx-include "$s.$i/"); done; done
  FLASHATTN_LIB=$lib timeout $(cap 400) ncu --clock-control none --nvtx "${nvtx[@]}" --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats \
    --section InstructionStats --section ComputeWorkloadAnalysis ${FLASHATTN_PROFILE_EXTRA:-} \
    python3 bench/profile_forward.py "${profile_shapes[@]}" > "$logs/profile.log" 2>&1
fi

# Nsight Compute over one backward call per implementation (bench/profile_backward.py: ours with
# each main kernel forced, torch FA2, cuDNN) on FLASHATTN_PROFILE_BWD_SHAPES. Step profile_bwd (not
# in the default list). Log: profile_bwd.log.
if wants profile_bwd && [[ -f $lib ]] && command -v ncu > /dev/null; then
  bwd_shapes=(${FLASHATTN_PROFILE_BWD_SHAPES:-d128n1k d128n16k})
  bwd_impls=(${FLASHATTN_PROFILE_BWD_IMPLS:-ours_sm80 ours_sm90 fa2 cudnn})
  nvtx=()
  for s in "${bwd_shapes[@]}"; do for i in "${bwd_impls[@]}"; do nvtx+=(--nvtx-include "$s.$i/"); done; done
  FLASHATTN_LIB=$lib timeout $(cap 400) ncu --clock-control none --nvtx "${nvtx[@]}" --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis ${FLASHATTN_PROFILE_EXTRA:-} \
    python3 bench/profile_backward.py "${bwd_shapes[@]}" > "$logs/profile_bwd.log" 2>&1
  # torch's FA2 backward runs on the autograd thread, outside the NVTX ranges: a second pass that
  # runs FA2 alone and selects its kernels by name. Log: profile_bwd_fa2.log.
  if [[ " ${bwd_impls[*]} " == *" fa2 "* ]]; then
    FLASHATTN_PROFILE_BWD_ONLY=fa2 FLASHATTN_LIB=$lib timeout $(cap 200) ncu --clock-control none \
      --kernel-name regex:flash_bwd --section SpeedOfLight --section LaunchStats --section Occupancy \
      python3 bench/profile_backward.py "${bwd_shapes[@]}" > "$logs/profile_bwd_fa2.log" 2>&1
  fi
fi

# Step bwd_timeline (not in the default list): a second, measuring build (build-timeline: d64 and
# d128 only, -DFLASHATTN_CUDA_BWD_TIMELINE=ON) whose Hopper backward records per-CTA event times,
# then bench/bwd_timeline.py on FLASHATTN_TIMELINE_SHAPES: where a key block's time goes
# (kv wait, first S, per query block, epilogue, producer tail, the gap between CTAs of an SM).
# Logs: build_timeline.log, bwd_timeline.log; OUTDIR gets bwd-timeline.json.
if wants bwd_timeline; then
  start=$SECONDS
  cmake -S . -B build-timeline -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90 \
    -DFLASHATTN_HEADDIMS="64;128" -DFLASHATTN_CUDA_BWD_TIMELINE=ON -DFLASHATTN_BUILD_TESTS=OFF \
    -DFLASHATTN_BUILD_TOOLS=OFF -DFLASHATTN_BUILD_EXAMPLES=OFF > "$logs/build_timeline.log" 2>&1 &&
    timeout $(cap 400) ninja -C build-timeline -j"$(nproc)" flashattn >> "$logs/build_timeline.log" 2>&1
  echo "BUILD (timeline) rc=$? seconds=$((SECONDS - start))" >> "$logs/build_timeline.log"
  if [[ -f build-timeline/src/libflashattn.so ]]; then
    mkdir -p "$out/timeline"
    FLASHATTN_LIB=$root/build-timeline/src/libflashattn.so timeout $(cap 200) python3 bench/bwd_timeline.py \
      --out "$out/timeline" ${FLASHATTN_TIMELINE_SHAPES:-} > "$logs/bwd_timeline.log" 2>&1
    cp "$out/timeline/bwd-timeline.json" "$out/" 2>/dev/null
    tar -czf "$out/timeline-csv.tar.gz" -C "$out" timeline && rm -rf "$out/timeline"
  fi
fi

# ---- Backward (issue 4) ----------------------------------------------------------------------
# Steps pytest_bwd, sanitize_bwd, bench_bwd (C++ backward cases run in the ctest step above, label
# gpu). Logs: tests_bwd.log, sanitize_bwd.log, bench_bwd.log; OUTDIR gets h200-backward.csv/.png.
bwd_test_groups=("dense" "head_dims or long" "window or softcap or alibi or dropout or everything or gqa"
                 "varlen or deterministic or race or large or workspace or strided or buffers or empty")
if wants pytest_bwd && [[ -f $lib ]]; then
  pytest_groups "backward " test_backward.py 600 "${bwd_test_groups[@]}" > "$logs/tests_bwd.log" 2>&1
fi
# Step pytest_bwd_sm80 (not in the default list): the same groups with the mma.sync kernel forced
# (the library picks the Hopper kernel at d64, d128 from 1k queries and d256 unless deterministic, on sm_90).
if wants pytest_bwd_sm80 && [[ -f $lib ]]; then
  FLASHATTN_CUDA_BWD_KERNEL=sm80 pytest_groups "backward sm80 " test_backward.py 600 "${bwd_test_groups[@]}" \
    >> "$logs/tests_bwd.log" 2>&1
fi
# Step pytest_bwd_sm90: the Hopper backward (kernels/bwd_kernel_sm90.cuh at d64/d128,
# kernels/bwd_kernel_sm90_pds.cuh at d256, which only this variable selects; without dropout, the
# rest runs the mma.sync kernel) forced on the same groups. Its mbarrier rings deadlock rather than
# fail on a protocol error, so short checked CLI problems run first, each under a 60 s timeout, and
# the suite runs only if all passed. d128: causal, ragged query and key blocks, and deterministic
# with 72 (sequence, head) pairs, so one chunk per pair and each CTA walks all 3 key blocks (the K/V
# stage is reused, the Q ring wraps). d256 (first run in session 6): the same problem
# (5 key blocks of 64), then the extras kernel (softcap, ALiBi, GQA, a local window, varlen). All
# small enough for the CLI's fp64 check.
bwd_sm90_smoke=(
  "--seqlen-q 100 --seqlen-k 300 --head-dim 128 --heads 8 --batch 9 --causal --backward --deterministic"
  "--seqlen-q 100 --seqlen-k 300 --head-dim 256 --heads 8 --batch 9 --causal --backward --deterministic"
  "--varlen --seqlen 200 --heads 4 --kv-heads 2 --head-dim 256 --window 40,8 --softcap 30 --alibi --backward"
)
if wants pytest_bwd_sm90 && [[ -f $lib ]]; then
  echo "=== the sm90 backward (FLASHATTN_CUDA_BWD_KERNEL=sm90)" >> "$logs/tests_bwd.log"
  smoke_ok=1
  for c in "${bwd_sm90_smoke[@]}"; do
    echo "=== sm90 backward smoke: $c" >> "$logs/tests_bwd.log"
    # shellcheck disable=SC2086
    if ! FLASHATTN_CUDA_BWD_KERNEL=sm90 timeout $(cap 60) "$cli" --backend cuda $c --check --iters 1 --warmup 0 \
         >> "$logs/tests_bwd.log" 2>&1; then
      echo "=== sm90 backward smoke problem failed or hung (rc=$?): $c" >> "$logs/tests_bwd.log"
      smoke_ok=0
      break
    fi
  done
  if ((smoke_ok)); then
    FLASHATTN_CUDA_BWD_KERNEL=sm90 pytest_groups "backward sm90 " test_backward.py 600 "${bwd_test_groups[@]}" \
      >> "$logs/tests_bwd.log" 2>&1
  else
    echo "=== sm90 backward suite skipped (a smoke problem failed)" >> "$logs/tests_bwd.log"
    bwd_sm90_smoke_failed=1 # step bench_bwd drops its forced-sm90 variants
  fi
fi
sanitize_bwd_cases=(
  "--seqlen-q 113 --seqlen-k 203 --head-dim 64 --heads 2 --batch 2 --backward"
  "--seqlen-q 128 --seqlen-k 217 --head-dim 128 --causal --dtype fp16 --backward --deterministic"
  "--varlen --seqlen 200 --heads 4 --kv-heads 2 --head-dim 96 --window 32,8 --backward"
  "--seqlen 130 --head-dim 256 --softcap 30 --alibi --dropout 0.1 --backward"
)
if wants sanitize_bwd && can_sanitize; then sanitize "" "${sanitize_bwd_cases[@]}" > "$logs/sanitize_bwd.log" 2>&1; fi
if wants bench_bwd && [[ -f $lib ]]; then
  bwd_bench_args=()
  [[ $mode == quick && ${FLASHATTN_BENCH_GRID:-} != full ]] && bwd_bench_args=(--quick)
  [[ $tuning == ON ]] && bwd_bench_args+=(--tiles) # every backward tiling of the tuning build, h200-backward-tiles.csv
  # FLASHATTN_BENCH_BWD_ARGS: extra arguments, e.g. "--variant sm90:FLASHATTN_CUDA_BWD_KERNEL=sm90".
  # A variant forcing the Hopper backward is left out when step pytest_bwd_sm90 saw a smoke problem
  # fail or hang (it would hang the benchmark too).
  read -r -a extra_bwd_args <<< "${FLASHATTN_BENCH_BWD_ARGS:-}"
  if [[ ${bwd_sm90_smoke_failed:-0} == 1 ]]; then
    kept=()
    for ((i = 0; i < ${#extra_bwd_args[@]}; i++)); do
      a=${extra_bwd_args[i]}
      if [[ $a == --variant && ${extra_bwd_args[i+1]:-} == *FLASHATTN_CUDA_BWD_KERNEL=sm90* ]]; then
        echo "=== left out (sm90 backward smoke failed): --variant ${extra_bwd_args[i+1]}" >> "$logs/bench_bwd.log"
        ((i++)); continue
      fi
      kept+=("$a")
    done
    extra_bwd_args=("${kept[@]}")
  fi
  FLASHATTN_LIB=$lib timeout $(cap ${FLASHATTN_BENCH_BWD_TIMEOUT:-900}) python3 bench/gpu_backward.py --out "$out" \
    "${bwd_bench_args[@]}" "${extra_bwd_args[@]}" >> "$logs/bench_bwd.log" 2>&1
fi
# ---- end of the backward block ------------------------------------------------------------------

# ---- Inference: KV cache, paged K/V, split-KV, combine (issue 6) --------------------------------
# Step decode: tests/gpu/test_inference.py (groups in separate processes), compute-sanitizer on CLI
# decode problems (paged reads must stay inside each sequence's blocks), bench/gpu_decode.py (the
# issue's whole grid; ~2 minutes). Logs: tests_decode.log, sanitize_decode.log, bench_decode.log;
# OUTDIR gets h200-decode.csv/.png. The C++ CUDA cases (Cuda/KvCacheAttention.*, CudaPagedAttention,
# CudaCombine, CudaKvCacheDecode) run in the ctest step (label gpu).
decode_test_groups=("kvcache_grid" "kvcache and not grid" "paged or split or combine")
sanitize_decode_cases=(
  "--kvcache --paged --page-size 16 --batch 3 --seqlen-q 1 --seqlen-k 1000 --heads 8 --kv-heads 2 --head-dim 128 --rotary-dim 64 --causal"
  "--kvcache --batch 2 --seqlen-k 3000 --heads 8 --kv-heads 1 --head-dim 64 --num-splits 7"
  "--kvcache --paged --page-size 64 --batch 2 --seqlen-q 3 --seqlen-k 500 --heads 4 --kv-heads 2 --head-dim 128 --softcap 20 --causal"
)
# Experimental: the split-keys decode kernel (kernels/fwd_decode_kernel.cuh), forced onto every
# inference call (FLASHATTN_CUDA_DECODE=split_keys, then =split_keys_deep). Step decode_split_keys
# (not in the default list): the decode test groups and compute-sanitizer (memcheck, racecheck: the
# warps' rings are guarded by per-warp waits and __syncwarp only) on the decode CLI problems. A
# protocol error would hang rather than fail, so a short CLI problem runs first under a 60 s timeout
# and the rest runs only if it finished. Logs: tests_decode_sk.log, sanitize_decode_sk.log.
# It runs before step decode, whose benchmark leaves out a variant whose smoke problem failed.
decode_bench_skip=()
if wants decode_split_keys && [[ -f $lib ]]; then
  for variant in split_keys split_keys_deep; do
    echo "=== the split-keys decode kernel (FLASHATTN_CUDA_DECODE=$variant)" >> "$logs/tests_decode_sk.log"
    if FLASHATTN_CUDA_DECODE=$variant timeout $(cap 60) "$cli" --backend cuda --kvcache --paged --page-size 16 \
         --batch 3 --seqlen-q 1 --seqlen-k 1000 --heads 8 --kv-heads 2 --head-dim 128 --causal --check --iters 1 \
         --warmup 0 >> "$logs/tests_decode_sk.log" 2>&1; then
      FLASHATTN_CUDA_DECODE=$variant pytest_groups "inference $variant " test_inference.py 600 \
        "${decode_test_groups[@]}" >> "$logs/tests_decode_sk.log" 2>&1
      if can_sanitize; then
        echo "=== $variant" >> "$logs/sanitize_decode_sk.log"
        FLASHATTN_CUDA_DECODE=$variant sanitize --check "${sanitize_decode_cases[@]}" >> "$logs/sanitize_decode_sk.log" 2>&1
      fi
    else
      echo "=== $variant smoke problem failed or hung (rc=$?): its suite skipped" >> "$logs/tests_decode_sk.log"
    fi
  done
fi
# Step decode_alt (not in the default list; with step decode): A/B builds of compile-time kernel
# choices, timed as columns of step decode's benchmark (gpu_decode.py --lib), beside the library as
# built and the same baselines. FLASHATTN_ALT_DEFINES: one build per '|'-separated item, each a
# ';'-separated list of definitions (FLASHATTN_CUDA_EXPERIMENT_DEFINES), e.g.
# "FLASHATTN_DECODE_BLOCK_N=32|FLASHATTN_DECODE_WARPS=8"; head dims FLASHATTN_ALT_HEADDIMS (default
# 128, the benchmark's), built side by side in build-alt-1, -2, ... Log: build_alt.log; the column
# is the definitions without their FLASHATTN_ / DECODE_ prefixes.
decode_libs=()
if wants decode_alt && [[ -n ${FLASHATTN_ALT_DEFINES:-} ]]; then
  start=$SECONDS
  IFS='|' read -r -a alt_items <<< "$FLASHATTN_ALT_DEFINES"
  jobs_each=$(( $(nproc) / ${#alt_items[@]} )); ((jobs_each < 2)) && jobs_each=2
  for i in "${!alt_items[@]}"; do
    (cmake -S . -B "build-alt-$((i + 1))" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90 \
       -DFLASHATTN_HEADDIMS="${FLASHATTN_ALT_HEADDIMS:-128}" -DFLASHATTN_CUDA_TUNING=OFF -DFLASHATTN_CUDA_VERBOSE_PTXAS=ON \
       -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_TOOLS=OFF -DFLASHATTN_BUILD_EXAMPLES=OFF \
       -DFLASHATTN_CUDA_EXPERIMENT_DEFINES="${alt_items[$i]}" > "$logs/build_alt_$((i + 1)).log" 2>&1 &&
       timeout $(cap 400) ninja -C "build-alt-$((i + 1))" -j"$jobs_each" flashattn >> "$logs/build_alt_$((i + 1)).log" 2>&1
     echo "BUILD (alt $((i + 1)): ${alt_items[$i]}) rc=$? seconds=$((SECONDS - start))" >> "$logs/build_alt_$((i + 1)).log") &
  done
  wait
  for i in "${!alt_items[@]}"; do
    cat "$logs/build_alt_$((i + 1)).log" >> "$logs/build_alt.log" && rm "$logs/build_alt_$((i + 1)).log"
    name=${alt_items[$i]//FLASHATTN_/}; name=${name//DECODE_/}; name=${name//;/+}
    [[ -f build-alt-$((i + 1))/src/libflashattn.so ]] && decode_libs+=(--lib "$name:$root/build-alt-$((i + 1))/src/libflashattn.so")
  done
fi
if wants decode && [[ -f $lib ]]; then
  pytest_groups "inference " test_inference.py 600 "${decode_test_groups[@]}" > "$logs/tests_decode.log" 2>&1
  if can_sanitize; then sanitize --check "${sanitize_decode_cases[@]}" > "$logs/sanitize_decode.log" 2>&1; fi
  FLASHATTN_LIB=$lib timeout $(cap ${FLASHATTN_BENCH_DECODE_TIMEOUT:-900}) python3 bench/gpu_decode.py --out "$out" \
    "${decode_bench_skip[@]}" "${decode_libs[@]}" ${FLASHATTN_DECODE_BENCH_ARGS:-} > "$logs/bench_decode.log" 2>&1
fi
# Nsight Compute over one decode call per implementation (bench/profile_decode.py: ours under each
# FLASHATTN_CUDA_DECODE variant, cuDNN) on FLASHATTN_PROFILE_DECODE_SHAPES (default: its own list).
# Step profile_decode (not in the default list). Log: profile_decode.log.
if wants profile_decode && [[ -f $lib ]] && command -v ncu > /dev/null; then
  decode_shapes=(${FLASHATTN_PROFILE_DECODE_SHAPES:-L32k_b1 L8k_b64 L8k_b64p L128k_b16})
  decode_impls=(${FLASHATTN_PROFILE_DECODE_VARIANTS:-built tile64 split_keys_deep} cudnn)
  nvtx=()
  for s in "${decode_shapes[@]}"; do for i in "${decode_impls[@]}"; do nvtx+=(--nvtx-include "$s.$i/"); done; done
  FLASHATTN_LIB=$lib timeout $(cap 400) ncu --clock-control none --nvtx "${nvtx[@]}" --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats ${FLASHATTN_PROFILE_EXTRA:-} \
    python3 bench/profile_decode.py "${decode_shapes[@]}" > "$logs/profile_decode.log" 2>&1
  # FLASHATTN_PROFILE_SOURCE=1: once more with the warp-state sampling per SASS instruction
  # (SourceCounters) and the stall reasons per issued instruction, into a report whose details and
  # SASS source pages are printed (profile_decode_details.log, profile_decode_sass.csv).
  if [[ ${FLASHATTN_PROFILE_SOURCE:-0} == 1 ]]; then
    FLASHATTN_LIB=$lib timeout $(cap 300) ncu --clock-control none --nvtx "${nvtx[@]}" --section WarpStateStats \
      --section SourceCounters --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
      --import-source no -f -o "$logs/profile_decode_source" \
      python3 bench/profile_decode.py "${decode_shapes[@]}" > "$logs/profile_decode_source_run.log" 2>&1
    ncu -i "$logs/profile_decode_source.ncu-rep" --page details --print-details all \
      > "$logs/profile_decode_details.log" 2>&1
    ncu -i "$logs/profile_decode_source.ncu-rep" --page source --csv --print-source sass \
      > "$logs/profile_decode_sass.csv" 2>&1 ||
      ncu -i "$logs/profile_decode_source.ncu-rep" --page source --csv > "$logs/profile_decode_sass.csv" 2>&1
  fi
fi
# Step decode_timeline (not in the default list): the GPU timeline of single decode calls, ours
# (and FLASHATTN_TIMELINE_ENV's variants) against cuDNN and torch FA2, kernel by kernel, with the
# gaps between them (bench/decode_timeline.py, torch.profiler; shapes FLASHATTN_TIMELINE_SHAPES).
# Log: decode_timeline.log, also copied to OUTDIR.
if wants decode_timeline && [[ -f $lib ]]; then
  FLASHATTN_LIB=$lib timeout $(cap 300) python3 bench/decode_timeline.py ${FLASHATTN_TIMELINE_SHAPES:-} \
    > "$logs/decode_timeline.log" 2>&1
  cp "$logs/decode_timeline.log" "$out/"
fi
# ---- end of the inference block -----------------------------------------------------------------

{
  build_line=$(grep -hE '^BUILD ' "$logs/build.log" 2>/dev/null | tail -1)
  echo "== summary ($mode; steps:$steps) =="
  echo "${build_line:-no build line}"
  grep -hE " error|FAILED" "$logs/build.log" 2>/dev/null | head -5
  # Spills per kernel, the largest first: a count summary once hid the d128 Hopper backward's
  # 604 B (its producer's copy addresses) behind the many kernels with none.
  python3 - "$logs/build.log" <<'PY' 2>/dev/null
import re, subprocess, sys
kernel, spills = None, []
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"Compiling entry function '([^']+)'", line)
    if m:
        kernel = m.group(1)
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and kernel and int(m.group(1)) > 0:
        spills.append((int(m.group(1)), int(m.group(2)), kernel))
spills = sorted(set(spills), reverse=True)
try:
    names = subprocess.run(["c++filt"], input="\n".join(k for _, _, k in spills), capture_output=True, text=True).stdout.split("\n")
except OSError:
    names = [k for _, _, k in spills]
print(f"spills: {len(spills)} kernels with spill stores" + (", the largest:" if spills else ""))
for (stores, loads, kernel), name in list(zip(spills, names))[:6]:
    name = re.sub(r"flashattn::cuda::(kernels::)?|cutlass::", "", name or kernel)
    print(f"  {stores:5d} / {loads:5d} B  {name[:140]}")
PY
  grep -hE '^=== |(passed|failed|error).* in [0-9.]+s|Fatal|Segmentation' "$logs/tests.log" 2>/dev/null
  grep -hE '^FAILED|^ERROR' "$logs/tests.log" 2>/dev/null | head -20
  grep -hE 'tests passed|tests failed|\(Failed\)|\(Timeout\)' "$logs/ctest.log" 2>/dev/null | head -20
  grep -hE '^===|ERROR SUMMARY|^rc=' "$logs/sanitize.log" 2>/dev/null
  sed -n '/^forward TFLOP/,$p' "$logs/bench.log" 2>/dev/null
  grep -hE '(passed|failed|error).* in [0-9.]+s|^FAILED|^ERROR' "$logs/tests_python.log" 2>/dev/null | head -12
  grep -hE '^pip install|^Successfully|ERROR' "$logs/pip_install.log" 2>/dev/null | head -5
  grep -hE '(passed|failed|error).* in [0-9.]+s|^FAILED|^ERROR|^SKIPPED' "$logs/tests_pip_python.log" 2>/dev/null | head -30
  # backward (issue 4)
  grep -hE '^BUILD' "$logs/build_timeline.log" 2>/dev/null
  cat "$logs/bwd_timeline.log" 2>/dev/null | grep -v '^$' | tail -40
  grep -hE '^=== |(passed|failed|error).* in [0-9.]+s|Fatal|Segmentation' "$logs/tests_bwd.log" 2>/dev/null
  grep -hE '^FAILED|^ERROR' "$logs/tests_bwd.log" 2>/dev/null | head -20
  grep -hE '^===|ERROR SUMMARY|^rc=' "$logs/sanitize_bwd.log" 2>/dev/null
  sed -n '/^backward TFLOP/,$p' "$logs/bench_bwd.log" 2>/dev/null
  # inference (issue 6)
  grep -hE '^=== |(passed|failed|error).* in [0-9.]+s|Fatal|Segmentation' "$logs/tests_decode.log" 2>/dev/null
  grep -hE '^FAILED|^ERROR' "$logs/tests_decode.log" 2>/dev/null | head -20
  grep -hE '^===|ERROR SUMMARY|^rc=' "$logs/sanitize_decode.log" 2>/dev/null
  sed -n '/^decode TB\/s/,$p' "$logs/bench_decode.log" 2>/dev/null
  # the A/B builds (their columns are in the table above)
  grep -hE '^BUILD' "$logs/build_alt.log" 2>/dev/null
  grep -hE '^=== |(passed|failed|error).* in [0-9.]+s|Fatal|Segmentation|^FAILED|^ERROR' "$logs/tests_decode_sk.log" 2>/dev/null | head -30
  grep -hE '^===|ERROR SUMMARY|^rc=' "$logs/sanitize_decode_sk.log" 2>/dev/null
} | tee "$out/summary.txt"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
