#!/usr/bin/env python3
"""The work of device calls on a GPU machine, as subcommands (device tool: see docs/cuda-backend.md).

Each subcommand logs to OUT/<name>.log (OUT: --out, else $OUT, else ./gpu-out), prints one summary
line and appends it to OUT/summary.txt; `summary` prints that file, so a call that chains several
subcommands ends with the table of what ran:

  python3 scripts/gpu.py build --tests                    build-gpu: library, CLI, C++ suites (.gtest/)
  python3 scripts/gpu.py build --source .before --build-dir build-before --name before   another commit
  python3 scripts/gpu.py smoke --overrides backward_kernel=sm90   checked CLI problems, 60 s each
  python3 scripts/gpu.py pytest tests/gpu/test_forward.py -k varlen -k dense --overrides forward_kernel=sm80
  python3 scripts/gpu.py pytest tests/python/test_device_indices.py --sanitize memcheck
  python3 scripts/gpu.py ctest                            the CUDA cases of the C++ suite (build --tests)
  python3 scripts/gpu.py sanitize-cli                     memcheck + racecheck over small CLI problems
  python3 scripts/gpu.py bench decode --compare before:build-before/src/libflashattn.so -- --quick
  python3 scripts/gpu.py bench features -- --quick        issue 27: head_dim_v against cuDNN, sinks against none
  python3 scripts/gpu.py bench power                      clocks and power under sustained load (ours, cuDNN, cuBLAS)
  python3 scripts/gpu.py bench kernels -- --d 192 --dv 128 which kernels a call launches (ours, cuDNN; CUPTI)
  python3 scripts/gpu.py profile backward --shapes d128n16k    Nsight Compute over bench/profile_*.py
  python3 scripts/gpu.py pip-install                      `pip install .` offline (.whl/), then tests/python
  python3 scripts/gpu.py plan                             the full validation run, call by call
  python3 scripts/gpu.py summary

Kernels are forced through the library's overrides (src/core/overrides.h): `--overrides SPEC` sets
FLASHATTN_OVERRIDES for the step's process (e.g. forward_kernel=sm80, backward_kernel=sm90,
inference_kernel=split_keys); the benchmarks time them beside the planner's choice with
`--variant LABEL:SPEC` and another build with `--lib NAME:PATH` (bench's --compare). A library
carried compressed (`--lib X.so.xz`, and bench's `--lib NAME:X.so.xz`) is unpacked beside itself first.

Carried to the device: `.gtest/`, a GoogleTest install prefix for `build --tests` (e.g. include/gtest
and lib/libgtest*.a copied from a machine that has libgtest-dev); `.whl/` for pip-install
(scripts/fetch_wheels.sh). $FLASHATTN_COMMIT names the commit in the benchmark files (the device's
copy has no .git). --deadline-at EPOCH (or $GPU_DEADLINE_AT) cuts every step's time limit so that
the call ends before the device tool's own limit; set it once at the start of a chained call:
  export GPU_DEADLINE_AT=$(( $(date +%s) + 560 ))
"""

import argparse
import lzma
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIB = "build-gpu/src/libflashattn.so"

# The validation run, one device call per paragraph (each within the device tool's 10 minutes; a cut
# build resumes on the next call while the machine is warm). Every call starts with the deadline line.
PLAN = """\
export GPU_DEADLINE_AT=$(( $(date +%s) + 560 ))
# 1. every head dim, the CLI and the C++ suites (carry .gtest); OUT/env.txt, spills in the summary
python3 scripts/gpu.py build --tests

# 2-6. tests/gpu, one call each for o="" (the planner's choices), forward_kernel=sm80, forward_kernel=sm90,
#      backward_kernel=sm80, backward_kernel=sm90 (smoke first: a forced Hopper kernel that hangs shows
#      there, not in a suite)
o=""
python3 scripts/gpu.py smoke --overrides "$o" &&
  for f in forward backward inference value_dim_sink; do python3 scripts/gpu.py pytest tests/gpu/test_$f.py --overrides "$o"; done

# 7. the package's suite, the C++ CUDA cases, compute-sanitizer
python3 scripts/gpu.py pytest tests/python
python3 scripts/gpu.py ctest
python3 scripts/gpu.py sanitize-cli
python3 scripts/gpu.py pytest tests/python/test_device_indices.py --sanitize memcheck

# 8. the benchmarks (with --compare NAME:PATH for a before/after pair built by `build --source`)
python3 scripts/gpu.py bench forward -- --quick
python3 scripts/gpu.py bench backward -- --quick
python3 scripts/gpu.py bench decode -- --quick --variants
python3 scripts/gpu.py bench power -- --seconds 3   # clocks and power: what bounds the ratios above
python3 scripts/gpu.py summary
"""


def out_dir(args):
    path = Path(args.out or os.environ.get("OUT") or ROOT / "gpu-out")
    path.mkdir(parents=True, exist_ok=True)
    return path


def time_limit(args, wanted):
    """wanted seconds, cut to what the deadline leaves (minus a margin for the summary)."""
    deadline = args.deadline_at or float(os.environ.get("GPU_DEADLINE_AT", "0") or 0)
    if not deadline:
        return wanted
    return max(1, min(wanted, int(deadline - time.time() - 10)))


def run(args, name, command, limit, env=None, cwd=ROOT):
    """Runs command (a list) with its output in OUT/name.log; returns (rc, seconds). env: variables
    set for it (None: removed)."""
    log = out_dir(args) / f"{name}.log"
    limit = time_limit(args, limit)
    full_env = {**os.environ, **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v is not None}
    start = time.time()
    with open(log, "a") as f:
        f.write(f"$ {shlex.join(map(str, command))}\n")
        f.flush()
        try:
            rc = subprocess.run(command, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=limit,
                                env=full_env).returncode
        except subprocess.TimeoutExpired:
            rc = 124
            f.write(f"\n=== timed out after {limit} s\n")
        except OSError as e:  # e.g. no ncu or compute-sanitizer on this machine
            rc = 127
            f.write(f"=== {e}\n")
    return rc, time.time() - start


def report(args, line):
    print(line, flush=True)
    with open(out_dir(args) / "summary.txt", "a") as f:
        f.write(line + "\n")


def tail(path, lines):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def overrides_env(overrides):
    """--overrides given (even ""): FLASHATTN_OVERRIDES exactly that; not given: as inherited."""
    return {} if overrides is None else {"FLASHATTN_OVERRIDES": overrides}


def unpacked(path):
    """A library carried compressed (X.so.xz: a full build is ~100 MB, the device tool carries 64 MiB)
    -> X.so beside it, unpacked once (again when the .xz is newer); any other path as it is."""
    packed = ROOT / path
    if packed.suffix != ".xz":
        return path
    target = packed.with_suffix("")
    if not target.exists() or target.stat().st_mtime < packed.stat().st_mtime:
        part = target.with_name(target.name + ".part")
        part.write_bytes(lzma.decompress(packed.read_bytes()))
        part.replace(target)
    return str(target)


def unpacked_lib_options(options):
    """The benchmarks' `--lib NAME:PATH` (and `--lib=NAME:PATH`) options with each PATH unpacked."""
    out, after_lib = [], False
    for option in options:
        if after_lib or option.startswith("--lib="):
            prefix = "" if after_lib else "--lib="
            name, sep, path = option[len(prefix):].partition(":")
            option = f"{prefix}{name}{sep}{unpacked(path)}" if sep else option
        after_lib = option == "--lib"
        out.append(option)
    return out


def library_env(lib, overrides=None):
    """Both test suites and the benchmarks find the library (and the package under python/) through
    these (a --lib X.so.xz is unpacked first)."""
    return {"FLASHATTN_LIBRARY": str((ROOT / unpacked(lib)).resolve()), "PYTHONPATH": str(ROOT / "python"),
            "PYTHONUNBUFFERED": "1", **overrides_env(overrides)}


def label(overrides):
    return "-" + re.sub(r"[^A-Za-z0-9_.+-]", "-", overrides.replace(",", "+")) if overrides else ""


def pytest_result(log):
    lines = tail(log, 40).splitlines()
    result = next((l for l in reversed(lines) if " passed" in l or " failed" in l or " error" in l), "no pytest summary")
    sanitizer = next((l for l in reversed(lines) if "ERROR SUMMARY" in l), "")
    return f"{result.strip('= ')} {sanitizer}".rstrip()


# ------------------------------------------------------------------------------------------------

def cmake_list(value):
    """A list option for CMake (head dims, archs): commas or semicolons between the items, so that
    `--headdims 64,128` needs no quoting from the shell."""
    return ";".join(item.strip() for item in re.split(r"[,;]", value) if item.strip())


def spills(log):
    """(stores, loads, kernel) of every kernel ptxas reports spilling, the largest first."""
    kernel, found = None, set()
    for line in tail(log, 10 ** 7).splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            kernel = m.group(1)
        if (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)) and kernel and int(m.group(1)):
            found.add((int(m.group(1)), int(m.group(2)), kernel))
    return sorted(found, reverse=True)


def serialized_wgmma(log):
    """Kernels in which ptxas serialised the wgmma pipeline (C7514 and its kin: an accumulator read,
    or a wait it had to insert, inside a wgmma's pipeline stage): every product then waits for the
    previous one, 1.2-1.5x slower (docs/perf-log.md, session 18, E)."""
    return sorted({m.group(2) for m in re.finditer(r"\((C751\d)\)[^\n]*?function '([^']+)'", tail(log, 10 ** 7))})


ENV_PROBE = ("nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw "
             "--format=csv; nvcc --version | tail -2; {python} -c 'import torch; print(\"torch\", torch.__version__, "
             "\"cuda\", torch.version.cuda, \"cudnn\", torch.backends.cudnn.version())'")


def cmd_build(args):
    out = out_dir(args)
    with open(out / "env.txt", "a") as f:
        f.write(subprocess.run(ENV_PROBE.format(python=sys.executable), shell=True, capture_output=True,
                               text=True).stdout)
    source = (ROOT / args.source).resolve()
    cutlass = source / "third_party" / "cutlass"
    if not cutlass.exists() and source != ROOT:  # a carried snapshot of another commit
        cutlass.parent.mkdir(exist_ok=True)
        cutlass.symlink_to(ROOT / "third_party" / "cutlass")
    build_dir = (ROOT / args.build_dir).resolve()
    tests = "ON" if args.tests and (ROOT / ".gtest").is_dir() else "OFF"
    configure = ["cmake", "-S", source, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 "-DFLASHATTN_CUDA=ON", f"-DFLASHATTN_CUDA_ARCHS={args.archs}", f"-DFLASHATTN_HEADDIMS={args.headdims}",
                 "-DFLASHATTN_CUDA_VERBOSE_PTXAS=ON", f"-DFLASHATTN_BUILD_TESTS={tests}", "-DFLASHATTN_BUILD_TOOLS=ON",
                 "-DFLASHATTN_BUILD_EXAMPLES=OFF"]
    if tests == "ON":
        configure.append(f"-DGTEST_ROOT={ROOT / '.gtest'}")
    log = out / f"{args.name}-build.log"
    rc, _ = run(args, f"{args.name}-build", configure, 120)
    seconds = 0.0
    if rc == 0:
        targets = ["flashattn", "flashattn-cli"] + (["backend_tests", "inference_tests"] if tests == "ON" else [])
        rc, seconds = run(args, f"{args.name}-build", ["ninja", "-C", build_dir, f"-j{os.cpu_count()}", *targets],
                          args.timeout)
    found, serial = spills(log), serialized_wgmma(log)
    report(args, f"build {args.name}: rc={rc} {seconds:.0f} s (head dims {args.headdims}, archs {args.archs}, "
                 f"{os.cpu_count()} cores, tests {tests}); {len(found)} kernels spill; "
                 f"{len(serial)} with serialised wgmma")
    for kernel in serial:
        report(args, f"  SERIALISED WGMMA (ptxas C751x)  {kernel[:140]}")
    for stores, loads, kernel in found[:6]:
        report(args, f"  spill {stores:5d} / {loads:5d} B  {kernel[:140]}")
    if rc:
        print(tail(log, 30))
    return rc


# Small problems that reach every kernel family: plain, causal ragged, GQA varlen with a window, the
# extras (softcap, ALiBi, dropout), a backward, a paged KV cache and a decode with split-KV.
SANITIZE_PROBLEMS = [
    "--seqlen-q 128 --seqlen-k 217 --head-dim 128 --causal --dtype fp16",
    "--seqlen-q 113 --seqlen-k 203 --head-dim 64 --heads 2 --batch 2",
    "--varlen --seqlen 200 --heads 4 --kv-heads 2 --head-dim 128 --window 32,8",
    "--seqlen 130 --head-dim 128 --softcap 30 --alibi --dropout 0.1",
    "--seqlen 77 --head-dim 64 --causal --backward",
    "--seqlen 300 --head-dim 128 --heads 4 --kv-heads 2 --causal --backward",
    "--kvcache --paged --page-size 16 --batch 3 --seqlen-q 2 --seqlen-k 300 --heads 8 --kv-heads 2 --head-dim 128",
    "--kvcache --batch 2 --seqlen-k 1000 --heads 8 --kv-heads 2 --head-dim 128",
    # The Hopper backward at 192 / 128: ragged 96-key blocks, varlen, GQA's scratch; the ordered dQ.
    "--varlen --seqlen 300 --heads 4 --kv-heads 2 --head-dim 192 --head-dim-v 128 --causal --backward",
    "--seqlen 250 --heads 2 --head-dim 192 --head-dim-v 128 --backward --deterministic",
]
# Checked problems for `smoke` (the Hopper kernels wait on mbarriers: a protocol error hangs rather
# than fails, and so does a miscounted ordered dQ): the forward; the backward with ragged blocks,
# deterministic chunks that walk every key block, the ordered dQ (d128 ragged causal, d64 varlen
# window, d256 causal), and the extras; a paged decode.
SMOKE_PROBLEMS = [
    "--seqlen 1024 --head-dim 128 --heads 4 --batch 2 --causal",
    "--seqlen-q 100 --seqlen-k 300 --head-dim 128 --heads 8 --batch 9 --causal --backward --deterministic",
    "--seqlen-q 777 --seqlen-k 1000 --head-dim 128 --heads 8 --batch 3 --causal --backward --deterministic",
    "--varlen --seqlen 600 --heads 4 --kv-heads 2 --head-dim 64 --window 90,20 --backward --deterministic",
    "--seqlen-q 100 --seqlen-k 300 --head-dim 256 --heads 8 --batch 9 --causal --backward --deterministic",
    "--varlen --seqlen 200 --heads 4 --kv-heads 2 --head-dim 256 --window 40,8 --softcap 30 --alibi --backward",
    "--kvcache --paged --page-size 16 --batch 3 --seqlen-q 1 --seqlen-k 1000 --heads 8 --kv-heads 2 --head-dim 128 "
    "--causal",
    "--seqlen 700 --head-dim 192 --head-dim-v 128 --heads 4 --batch 2 --causal --learnable-sink --backward --deterministic",
    "--kvcache --batch 3 --seqlen-q 1 --seqlen-k 1000 --heads 8 --kv-heads 2 --head-dim 128 --head-dim-v 64 "
    "--learnable-sink --causal",
]


def cli(args):
    return str(ROOT / args.build_dir / "tools" / "cli" / "flashattn-cli")


def cmd_smoke(args):
    name = "smoke" + label(args.overrides)
    rcs = [run(args, name, [cli(args), "--backend", "cuda", "--check", "--iters", "1", "--warmup", "0", *p.split()],
               args.timeout, overrides_env(args.overrides))[0] for p in SMOKE_PROBLEMS]
    report(args, f"{name}: {rcs.count(0)} of {len(rcs)} checked problems passed, {rcs.count(124)} timed out")
    if any(rcs):
        print(tail(out_dir(args) / f"{name}.log", 20))
    return 1 if any(rcs) else 0


def cmd_pytest(args):
    name = (args.name or "pytest-" + "-".join(Path(f).stem for f in args.files)) + label(args.overrides)
    if args.sanitize:
        name += f"-{args.sanitize}"
    # One process per test folder (tests/gpu and tests/python each import their own `reference`
    # module) and per -k (a kernel fault, which ends the CUDA context, costs one group only).
    folders = {}
    for f in args.files:
        folders.setdefault(str(Path(f).parent), []).append(f)
    worst = 0
    for files in folders.values():
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs", *files]
        if args.sanitize:
            command = ["compute-sanitizer", f"--tool={args.sanitize}", "--error-exitcode=9",
                       "--target-processes=all", *command]
        for group in args.k or [None]:
            rc, seconds = run(args, name, command + (["-k", group] if group else []), args.timeout,
                              library_env(args.lib, args.overrides))
            log = out_dir(args) / f"{name}.log"
            what = " ".join(Path(f).name for f in files) if len(folders) > 1 else ""
            report(args, f"{name}{f' [{what}]' if what else ''}{f' -k {group!r}' if group else ''}: rc={rc} "
                         f"{seconds:.0f} s: {pytest_result(log)}")
            if rc:
                print(tail(log, 25))
            worst = worst or rc
    return worst


def cmd_ctest(args):
    rc, seconds = run(args, "ctest", ["ctest", "--test-dir", args.build_dir, "-L", "gpu", f"-j{args.jobs}",
                                      "--output-on-failure"], args.timeout)
    result = next((l for l in reversed(tail(out_dir(args) / "ctest.log", 30).splitlines()) if "tests passed" in l),
                  "no ctest summary")
    report(args, f"ctest (gpu label): rc={rc} {seconds:.0f} s: {result}")
    return rc


def cmd_sanitize_cli(args):
    failures, suffix = 0, label(args.overrides)
    for tool in args.tools.split(","):
        for problem in SANITIZE_PROBLEMS:
            command = ["compute-sanitizer", f"--tool={tool}", "--error-exitcode=9", cli(args), "--backend", "cuda",
                       "--iters", "1", "--warmup", "0", *problem.split()]
            rc, _ = run(args, f"sanitize-{tool}{suffix}", command, 300, overrides_env(args.overrides))
            failures += rc != 0
    summary = [l.strip("= ") for tool in args.tools.split(",")
               for l in tail(out_dir(args) / f"sanitize-{tool}{suffix}.log", 100000).splitlines() if "ERROR SUMMARY" in l]
    report(args, f"sanitize-cli{suffix} ({args.tools}, {len(SANITIZE_PROBLEMS)} problems): {failures} failing runs; "
                 f"{len(summary)} summaries, errors: {sorted(set(summary))}")
    return 1 if failures else 0


BENCHES = {"forward": "bench/gpu_forward.py", "backward": "bench/gpu_backward.py", "decode": "bench/gpu_decode.py",
           "features": "bench/gpu_features.py", "power": "bench/gpu_power.py", "kernels": "bench/gpu_kernels.py"}


def cmd_bench(args):
    command = [sys.executable, BENCHES[args.which], "--out", str(out_dir(args))]
    for compare in args.compare:
        command += ["--lib", compare]
    command = unpacked_lib_options(command + args.extra)
    rc, seconds = run(args, f"bench-{args.which}", command, args.timeout, library_env(args.lib))
    report(args, f"bench {args.which}: rc={rc} {seconds:.0f} s")
    print(tail(out_dir(args) / f"bench-{args.which}.log", args.show))
    return rc


# Nsight Compute over one call of each implementation (bench/profile_*.py: NVTX ranges SHAPE.IMPL).
PROFILES = {
    "forward": ("d64c1k d64n4k d128c1k d256c1k", "ours_sm80 ours_sm90 fa2 cudnn",
                "SpeedOfLight Occupancy LaunchStats SchedulerStats WarpStateStats InstructionStats "
                "ComputeWorkloadAnalysis"),
    "backward": ("d128n1k d128n16k", "ours_sm80 ours_sm90 fa2 cudnn",
                 "SpeedOfLight Occupancy LaunchStats SchedulerStats WarpStateStats MemoryWorkloadAnalysis"),
    "decode": ("L32k_b1 L8k_b64 L8k_b64p L128k_b16", "built tile64 split_keys cudnn",
               "SpeedOfLight MemoryWorkloadAnalysis Occupancy LaunchStats SchedulerStats WarpStateStats"),
}


def cmd_profile(args):
    shapes, impls, sections = PROFILES[args.which]
    shapes, impls = (args.shapes or shapes).split(), (args.impls or impls).split()
    env = library_env(args.lib)
    if args.which == "decode":  # our implementations: the overrides profile_decode.py sets
        env["FLASHATTN_PROFILE_DECODE_VARIANTS"] = " ".join(i for i in impls if i != "cudnn")
    sections = [*sections.split(), *(["SourceCounters"] if args.export else [])]
    ncu = ["ncu", "--clock-control", "none", *[a for s in sections for a in ("--section", s)],
           *shlex.split(args.ncu_args)]
    script = [sys.executable, f"bench/profile_{args.which}.py", *shapes]
    nvtx = [a for s in shapes for i in impls for a in ("--nvtx-include", f"{s}.{i}/")]
    name = f"profile-{args.which}"

    def profile(part, command, env):
        """One ncu pass; with --export its report is kept as OUT/<export>-<part>.ncu-rep and printed
        into the log (the details page) and beside it (the source page: stall samples per SASS
        instruction with its CUDA line, csv)."""
        if not args.export:
            return run(args, name, [*ncu, *command], args.timeout, env)
        report_path = out_dir(args) / f"{args.export}-{part}"
        rc, seconds = run(args, name, [*ncu, "-f", "-o", str(report_path), *command], args.timeout, env)
        imported = ["ncu", "-i", f"{report_path}.ncu-rep"]
        run(args, name, [*imported, "--page", "details"], 120)
        with open(out_dir(args) / f"{args.export}-{part}-source.csv", "w") as f:
            subprocess.run([*imported, "--page", "source", "--csv", "--print-source", "cuda,sass"],
                           stdout=f, stderr=subprocess.STDOUT, timeout=time_limit(args, 300))
        return rc, seconds

    rc, seconds = profile("ours", ["--nvtx", *nvtx, *script], env)
    # torch runs its backward on the autograd thread, outside the NVTX ranges: each torch backend
    # alone, FA2's kernels by name; cuDNN's every kernel of the pass (its names vary by version: the
    # forwards that set the problem up show too, before its two backward calls).
    for impl, kernels in (("fa2", ["--kernel-name", "regex:flash_bwd"]), ("cudnn", [])):
        if args.which == "backward" and impl in impls:
            rc2, more = profile(impl, [*kernels, *script], {**env, "FLASHATTN_PROFILE_BWD_ONLY": impl})
            rc, seconds = rc or rc2, seconds + more
    report(args, f"{name} ({' '.join(shapes)}; {' '.join(impls)}): rc={rc} {seconds:.0f} s")
    return rc


def cmd_pip_install(args):
    """What a user does: `pip install .` (offline: the build and test requirements from .whl/), then
    tests/python against the installed package (no FLASHATTN_LIBRARY, no python/ on the path)."""
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(ROOT / ".whl"), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "FLASHATTN_CUDA": "ON", "FLASHATTN_LIBRARY": None, "PYTHONPATH": None}
    pip = [sys.executable, "-m", "pip", "install"]
    rc, _ = run(args, "pip-install", [*pip, "-q", *sorted(map(str, (ROOT / ".whl").glob("*.whl")))], 300, env)
    install = [*pip, "-v", "--no-deps", "-C", f"cmake.define.FLASHATTN_HEADDIMS={args.headdims}",
               "-C", f"cmake.define.FLASHATTN_CUDA_ARCHS={args.archs}", str(ROOT)]
    rc, seconds = run(args, "pip-install", install, args.timeout, env)
    if rc:  # the isolated build environment comes from .whl too; without isolation it needs less
        rc, seconds = run(args, "pip-install", [*install, "--no-build-isolation"], args.timeout, env)
    report(args, f"pip install .: rc={rc} {seconds:.0f} s (head dims {args.headdims}, archs {args.archs})")
    if rc:
        print(tail(out_dir(args) / "pip-install.log", 30))
        return rc
    rc, seconds = run(args, "pytest-pip", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rsf", "."],
                      args.timeout, env, cwd=ROOT / "tests" / "python")
    report(args, f"pytest tests/python (installed package): rc={rc} {seconds:.0f} s: "
                 f"{pytest_result(out_dir(args) / 'pytest-pip.log')}")
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output folder (default: $OUT, else ./gpu-out)")
    ap.add_argument("--deadline-at", type=float, help="epoch seconds by which every step must end ($GPU_DEADLINE_AT)")
    sub = ap.add_subparsers(dest="command", required=True)

    def command(name, fn, help, timeout=None, build_dir=False, lib=False, overrides=False):
        p = sub.add_parser(name, help=help)
        p.set_defaults(fn=fn)
        if timeout:
            p.add_argument("--timeout", type=int, default=timeout, help="seconds (default %(default)s)")
        if build_dir:
            p.add_argument("--build-dir", default="build-gpu")
        if lib:
            p.add_argument("--lib", default=DEFAULT_LIB)
        if overrides:
            p.add_argument("--overrides", help="FLASHATTN_OVERRIDES for the step, e.g. forward_kernel=sm80 "
                                               "(src/core/overrides.h); not given: as inherited")
        return p

    p = command("build", cmd_build, "configure and build the library, the CLI (and the C++ tests)", 900)
    p.add_argument("--source", default=".", help="source tree (a carried snapshot of another commit, say)")
    p.add_argument("--build-dir", default="build-gpu")
    p.add_argument("--name", default="gpu", help="label of the log and summary line")
    p.add_argument("--headdims", type=cmake_list, default="32;64;96;128;192;256",
                   help="head dims to instantiate, separated by commas or semicolons (default %(default)s)")
    p.add_argument("--archs", type=cmake_list, default="80;90",
                   help="CUDA architectures, separated by commas or semicolons (default %(default)s)")
    p.add_argument("--tests", action="store_true", help="also the C++ test binaries (GoogleTest carried in .gtest/)")

    command("smoke", cmd_smoke, "small CLI problems with --check, each under a short time limit", 60, build_dir=True,
            overrides=True)

    p = command("pytest", cmd_pytest, "pytest files against a built library", 600, lib=True, overrides=True)
    p.add_argument("files", nargs="+")
    p.add_argument("-k", action="append", help="a -k expression; each one given runs in its own process")
    p.add_argument("--sanitize", choices=["memcheck", "racecheck", "initcheck", "synccheck"])
    p.add_argument("--name")

    p = command("ctest", cmd_ctest, "the CUDA cases (label gpu) of the C++ suite", 600, build_dir=True)
    p.add_argument("--jobs", type=int, default=4)

    p = command("sanitize-cli", cmd_sanitize_cli, "compute-sanitizer over small CLI problems", build_dir=True,
                overrides=True)
    p.add_argument("--tools", default="memcheck,racecheck")

    p = command("bench", cmd_bench, "a benchmark script against a built library (and others in the same process)",
                900, lib=True)
    p.add_argument("which", choices=sorted(BENCHES))
    p.add_argument("--compare", action="append", default=[], metavar="NAME:PATH",
                   help="also time the library at PATH, interleaved, in column ours_NAME_*")
    p.add_argument("--show", type=int, default=40, help="lines of the benchmark's output to print")
    p.epilog = "Arguments after a lone -- go to the benchmark script."

    p = command("profile", cmd_profile, "Nsight Compute over one call of each implementation (bench/profile_*.py)",
                400, lib=True)
    p.add_argument("which", choices=sorted(PROFILES))
    p.add_argument("--shapes", help="space-separated shapes of the script (default: its PROFILES entry)")
    p.add_argument("--impls", help="space-separated implementations (NVTX range names; default: all)")
    p.add_argument("--ncu-args", default="", help="more ncu arguments, e.g. '--metrics dram__bytes_read.sum'")
    p.add_argument("--export", help="keep each pass's report as OUT/EXPORT-<pass>.ncu-rep, with SourceCounters "
                                    "and the source page (stall samples per SASS line) as EXPORT-<pass>-source.csv")

    p = command("pip-install", cmd_pip_install, "pip install . offline (wheels in .whl/), then tests/python on it", 420)
    p.add_argument("--headdims", type=cmake_list, default="64;128;256",
                   help="head dims to instantiate, separated by commas or semicolons (default %(default)s)")
    p.add_argument("--archs", type=cmake_list, default="90",
                   help="CUDA architectures, separated by commas or semicolons (default %(default)s)")

    command("plan", lambda args: print(PLAN, end=""), "print the full validation run, one device call per paragraph")
    command("summary", lambda args: print(tail(out_dir(args) / "summary.txt", 200)), "print OUT/summary.txt")

    # Everything after a lone "--" belongs to the benchmark script; argparse's REMAINDER after a
    # positional would also swallow this script's own options (--compare, --timeout).
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    args = ap.parse_args(argv)
    args.extra = extra
    sys.exit(args.fn(args))

if __name__ == "__main__":
    main()
