#!/usr/bin/env python3
"""The work of one call on the GPU machine, as subcommands (device tool: see docs/architecture.md).

Each subcommand logs to OUT/<name>.log (OUT: --out, else $OUT, else ./gpu-out), prints one summary
line and appends it to OUT/summary.txt; `summary` prints that file, so a call that chains several
subcommands ends with the table of what ran:

  python3 scripts/gpu.py build --headdims 128             configure + build build-gpu (time recorded)
  python3 scripts/gpu.py build --source .before --build-dir build-before --name before
  python3 scripts/gpu.py pytest tests/python/test_device_indices.py --sanitize memcheck
  python3 scripts/gpu.py pytest tests/gpu/test_forward.py -k varlen --overrides fwd_kernel=sm80
  python3 scripts/gpu.py ctest                            the CUDA cases of the C++ suite (needs --tests)
  python3 scripts/gpu.py sanitize-cli                     memcheck + racecheck over small CLI problems
  python3 scripts/gpu.py bench decode --compare before:build-before/src/libflashattn.so -- --quick
  python3 scripts/gpu.py summary

--deadline-at EPOCH (or $GPU_DEADLINE_AT) cuts every step's time limit so that the call ends before
the device tool's own limit; set it once at the start of a chained call:
  export GPU_DEADLINE_AT=$(( $(date +%s) + 560 ))
"""

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIB = "build-gpu/src/libflashattn.so"


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


def run(args, name, command, limit, env=None):
    """Runs command (a list) with its output in OUT/name.log; returns (rc, seconds)."""
    log = out_dir(args) / f"{name}.log"
    limit = time_limit(args, limit)
    start = time.time()
    with open(log, "a") as f:
        f.write(f"$ {shlex.join(map(str, command))}\n")
        f.flush()
        try:
            rc = subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=limit,
                                env={**os.environ, **(env or {})}).returncode
        except subprocess.TimeoutExpired:
            rc = 124
            f.write(f"\n=== timed out after {limit} s\n")
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


def library_env(lib):
    """Both test suites find the library through these (tests/python: the package under python/)."""
    lib = str((ROOT / lib).resolve())
    return {"FLASHATTN_LIBRARY": lib, "FLASHATTN_LIB": lib, "PYTHONPATH": str(ROOT / "python"),
            "PYTHONUNBUFFERED": "1"}


# ------------------------------------------------------------------------------------------------

def cmd_build(args):
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
    rc, _ = run(args, f"{args.name}-build", configure, 120)
    seconds = 0.0
    if rc == 0:
        targets = ["flashattn", "flashattn-cli"] + (["backend_tests", "inference_tests"] if tests == "ON" else [])
        rc, seconds = run(args, f"{args.name}-build", ["ninja", "-C", build_dir, f"-j{os.cpu_count()}", *targets],
                          args.timeout)
    report(args, f"build {args.name}: rc={rc} {seconds:.0f} s (head dims {args.headdims}, archs {args.archs}, "
                 f"{os.cpu_count()} cores, tests {tests})")
    if rc:
        print(tail(out_dir(args) / f"{args.name}-build.log", 30))
    return rc


def cmd_pytest(args):
    name = args.name or "pytest-" + "-".join(Path(f).stem for f in args.files)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs", *args.files]
    if args.k:
        command += ["-k", args.k]
    if args.sanitize:
        command = ["compute-sanitizer", f"--tool={args.sanitize}", "--error-exitcode=9",
                   "--target-processes=all", *command]
        name += f"-{args.sanitize}"
    env = library_env(args.lib)
    if args.overrides:
        env["FLASHATTN_OVERRIDES"] = args.overrides
    rc, seconds = run(args, name, command, args.timeout, env)
    log = out_dir(args) / f"{name}.log"
    result = next((l for l in reversed(tail(log, 40).splitlines()) if " passed" in l or " failed" in l or
                   " error" in l), "no pytest summary")
    sanitizer = next((l for l in reversed(tail(log, 40).splitlines()) if "ERROR SUMMARY" in l), "")
    report(args, f"{name}: rc={rc} {seconds:.0f} s: {result.strip('= ')} {sanitizer}".rstrip())
    if rc:
        print(tail(log, 25))
    return rc


def cmd_ctest(args):
    rc, seconds = run(args, "ctest", ["ctest", "--test-dir", args.build_dir, "-L", "gpu", f"-j{args.jobs}",
                                      "--output-on-failure"], args.timeout)
    result = next((l for l in reversed(tail(out_dir(args) / "ctest.log", 30).splitlines()) if "tests passed" in l),
                  "no ctest summary")
    report(args, f"ctest (gpu label): rc={rc} {seconds:.0f} s: {result}")
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
]


def cmd_sanitize_cli(args):
    cli = str(Path(args.build_dir) / "tools" / "cli" / "flashattn-cli")
    failures = 0
    for tool in args.tools.split(","):
        for problem in SANITIZE_PROBLEMS:
            command = ["compute-sanitizer", f"--tool={tool}", "--error-exitcode=9", cli, "--backend", "cuda",
                       "--iters", "1", "--warmup", "0", *problem.split()]
            rc, _ = run(args, f"sanitize-{tool}", command, 300)
            failures += rc != 0
    summary = [l.strip("= ") for tool in args.tools.split(",")
               for l in tail(out_dir(args) / f"sanitize-{tool}.log", 100000).splitlines() if "ERROR SUMMARY" in l]
    report(args, f"sanitize-cli ({args.tools}, {len(SANITIZE_PROBLEMS)} problems): {failures} failing runs; "
                 f"{len(summary)} summaries, errors: {sorted(set(summary))}")
    return 1 if failures else 0


BENCHES = {"forward": "bench/gpu_forward.py", "backward": "bench/gpu_backward.py", "decode": "bench/gpu_decode.py"}


def cmd_bench(args):
    command = [sys.executable, BENCHES[args.which], "--out", str(out_dir(args))]
    for compare in args.compare:
        command += ["--lib", compare]
    command += args.extra
    rc, seconds = run(args, f"bench-{args.which}", command, args.timeout, library_env(args.lib))
    report(args, f"bench {args.which}: rc={rc} {seconds:.0f} s")
    print(tail(out_dir(args) / f"bench-{args.which}.log", args.show))
    return rc


def cmd_summary(args):
    print(tail(out_dir(args) / "summary.txt", 200))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output folder (default: $OUT, else ./gpu-out)")
    ap.add_argument("--deadline-at", type=float, help="epoch seconds by which every step must end ($GPU_DEADLINE_AT)")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="configure and build the library, the CLI (and the C++ tests)")
    p.add_argument("--source", default=".", help="source tree (a carried snapshot of another commit, say)")
    p.add_argument("--build-dir", default="build-gpu")
    p.add_argument("--name", default="gpu", help="label of the log and summary line")
    p.add_argument("--headdims", default="32;64;96;128;192;256")
    p.add_argument("--archs", default="80;90")
    p.add_argument("--tests", action="store_true", help="also the C++ test binaries (GoogleTest carried in .gtest/)")
    p.add_argument("--timeout", type=int, default=900)
    p.set_defaults(fn=cmd_build)

    p = sub.add_parser("pytest", help="pytest files against a built library")
    p.add_argument("files", nargs="+")
    p.add_argument("-k")
    p.add_argument("--lib", default=DEFAULT_LIB)
    p.add_argument("--sanitize", choices=["memcheck", "racecheck", "initcheck", "synccheck"])
    p.add_argument("--overrides", help="FLASHATTN_OVERRIDES for the run (docs/cuda-backend.md)")
    p.add_argument("--name")
    p.add_argument("--timeout", type=int, default=600)
    p.set_defaults(fn=cmd_pytest)

    p = sub.add_parser("ctest", help="the CUDA cases (label gpu) of the C++ suite")
    p.add_argument("--build-dir", default="build-gpu")
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--timeout", type=int, default=600)
    p.set_defaults(fn=cmd_ctest)

    p = sub.add_parser("sanitize-cli", help="compute-sanitizer over small CLI problems")
    p.add_argument("--build-dir", default="build-gpu")
    p.add_argument("--tools", default="memcheck,racecheck")
    p.set_defaults(fn=cmd_sanitize_cli)

    p = sub.add_parser("bench", help="a benchmark script against a built library (and others in the same process)")
    p.add_argument("which", choices=sorted(BENCHES))
    p.add_argument("--lib", default=DEFAULT_LIB)
    p.add_argument("--compare", action="append", default=[], metavar="NAME:PATH",
                   help="also time the library at PATH, interleaved, in column NAME")
    p.add_argument("--show", type=int, default=40, help="lines of the benchmark's output to print")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("extra", nargs=argparse.REMAINDER, help="-- then arguments for the benchmark script")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("summary", help="print OUT/summary.txt")
    p.set_defaults(fn=cmd_summary)

    args = ap.parse_args()
    if getattr(args, "extra", None) and args.extra[0] == "--":
        args.extra = args.extra[1:]
    sys.exit(args.fn(args))


if __name__ == "__main__":
    main()
