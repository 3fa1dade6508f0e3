"""Where a kernel's warps stall, by CUDA source line, from an Nsight Compute source page.

    python3 bench/ncu_stalls.py REPORT-source.csv KERNEL_SUBSTRING [TOP] [--diff | --sites FILE:LINE |
        --steps CYCLES[,CYCLES...] [--sms N] [--consumer-warps N]]

REPORT-source.csv is what `scripts/gpu.py profile ... --export NAME` writes beside each report (`ncu
-i NAME-PASS.ncu-rep --page source --csv --print-source cuda,sass`). For each profiled launch of the
kernel (the page lists them one after another; a template's instances profiled together, default
and deterministic kernels say, count as launches of their own), prints its stall samples by reason,
then its TOP source lines (default 25) by samples with their three largest reasons. --diff (two launches of one
kernel, say at 1k and at 16k tokens): each line's share of the first launch's samples against its
share of the second's, the TOP largest differences first: what one shape spends that the other does
not. --sites FILE:LINE (a line of an inlined helper, e.g. barrier.h:424, an mbarrier's wait loop):
that line's instructions with samples, each named by the nearest source lines of the kernel's own
code before it in address order (not the helper's file, CUTLASS / CuTe or the toolkit's headers),
that is by the call site that inlined it: which barrier a kernel waits at, where the line total sums
them all. --steps CYCLES[,CYCLES...] (a Hopper forward whose consumers wait for S with
`WARPGROUP.DEPBAR.LE gsb0, 0x1`, one figure of kernel cycles per launch, in page order): the step
loop's time split at its landmarks, in cycles of one step (the kernel's cycles over the steps of one
consumer warp, the loop's executed count over --sms x --consumer-warps, default 132 x 8): the K / V
barriers before the turn, the turn, the issue of S and of P V, the wait for S, and the softmax to
the loop's end; a split of the consumers' own time, so read it where the loop is most of a kernel
(and not as a model of the step's time: session 67's changes to its largest parts did not move it).
The producer warpgroup's samples count too (its waits on the consumers show as long_sb at its
barriers), so read a line's share against the 12 warps of a Hopper CTA, 4 of them the producer's.
"""
import collections
import csv
import sys


def kernel_rows(path, kernel):
    """The source page's rows in the kernel's sections, as (launch, function, file, header, row):
    launch counts the kernel's launches from 0, in page order; one ends where its first (file,
    function) section comes round again or another function (another instance of a template:
    default and deterministic kernels profiled together) begins."""
    launch, seen, current = -1, set(), None
    file = func = header = None
    for row in csv.reader(open(path)):
        if not row:
            continue
        if row[0] == "File Path":
            file = row[1]
        elif row[0] == "Function Name":
            func = row[1]
            if kernel in func:
                if launch < 0 or func != current or (file, func) in seen:
                    launch, seen, current = launch + 1, set(), func
                seen.add((file, func))
        elif row[0] == "Line No":
            header = row
        elif header and func and kernel in func:
            yield launch, func, file, header, row


def launches(path, kernel):
    """[(function, {'file:line': (samples, source, {reason: samples})})] per launch of the kernel, in
    page order."""
    results = []
    for launch, func, file, header, row in kernel_rows(path, kernel):
        results += [(func, {}) for _ in range(launch + 1 - len(results))]
        if len(row) > 2 and row[0] and row[2] == "-":  # a line's total
            cells = dict(zip(header, row))
            samples = cells.get("Warp Stall Sampling (All Samples)", "")
            if not samples.isdigit():
                continue
            reasons = {k[6:]: int(v) for k, v in cells.items()
                       if k.startswith("stall_") and "Not Issued" not in k and v.isdigit() and int(v) > 0}
            results[-1][1][f"{file.rsplit('/', 1)[-1]}:{row[0]}"] = (int(samples), row[1].strip()[:90], reasons)
    return results


def instructions(path, kernel):
    """[[(address, 'file:line', path, sass, samples, executed)] sorted by address] per launch of the
    kernel: the SASS rows of the source page, each under the source line it belongs to."""
    results, line = [], None
    for launch, _, file, header, row in kernel_rows(path, kernel):
        results += [{} for _ in range(launch + 1 - len(results))]
        if len(row) <= 4:
            continue
        if row[0]:
            line = row[0]
        elif row[2].startswith("0x"):
            cells = dict(zip(header, row))
            samples = cells.get("Warp Stall Sampling (All Samples)", "")
            count = int(samples) if samples.isdigit() else 0
            executed = cells.get("Instructions Executed", "")
            # (an instruction inlined from several lines is listed under each: keep one)
            if count >= results[-1].get(row[2], (0, "", "", "", -1))[4]:
                results[-1][row[2]] = (int(row[2], 16), f"{file.rsplit('/', 1)[-1]}:{line}", file, row[3].strip(), count,
                                       int(executed) if executed.isdigit() else 0)
    return [sorted(r.values()) for r in results]


def sites(instrs, target, top, context=3):
    """The instructions of source line `target` with samples, most first, each with the kernel's own
    source lines just before it in address order."""
    own = lambda path: not any(part in path for part in ("/cutlass/", "/cute/", "/third_party/", "/targets/"))
    total = sum(i[4] for i in instrs) or 1
    hits = [(k, i) for k, i in enumerate(instrs) if i[1] == target and i[4] > 0]
    print(f"{target}: {sum(i[4] for _, i in hits)} of {total} instruction samples, by call site")
    for k, (address, _, _, sass, samples, _) in sorted(hits, key=lambda h: -h[1][4])[:top]:
        before = []
        for _, where, path, _, _, _ in reversed(instrs[:k]):
            if where.split(":")[0] != target.split(":")[0] and own(path) and where not in before:
                before.append(where)
                if len(before) == context:
                    break
        print(f"{100 * samples / total:5.1f}%  {samples:8d}  +{address - instrs[0][0]:#07x}  {sass[:40]:40s}  after {', '.join(before)}")


STEP_PARTS = ("K / V barriers", "turn", "issue S", "issue P V", "wait for S", "softmax")


def steps(instrs, cycles, sms, consumer_warps):
    """One launch's step loop split at its landmarks (--steps), in cycles of one step."""
    waits = [i for i in instrs if "DEPBAR.LE gsb0, 0x1" in i[3]]
    if not waits:
        print("no wait for S (WARPGROUP.DEPBAR.LE gsb0, 0x1) in this launch")
        return
    executed = max(waits, key=lambda i: i[4])[5]
    at = [k for k, i in enumerate(instrs) if i[5] == executed]
    loop = instrs[at[0]:at[-1] + 1]
    total = sum(i[4] for i in loop) or 1
    step = cycles / (executed / (sms * consumer_warps))
    parts, part, products = dict.fromkeys(STEP_PARTS, 0), STEP_PARTS[0], 0
    for i in loop:
        if part == STEP_PARTS[0] and "BAR.SYNC" in i[3]:
            part = "turn"
        if "HGMMA" in i[3]:
            products += 1
            part = "issue S" if products <= 8 else "issue P V"
        if "DEPBAR.LE gsb0, 0x1" in i[3]:
            part = "wait for S"
        elif part == "wait for S":
            part = "softmax"
        parts[part] += i[4]
    print(f"step loop: {executed} executions, {len(loop)} instructions, {total} samples; {step:.0f} cycles a step")
    for name, samples in parts.items():
        print(f"  {name:15s} {100 * samples / total:5.1f}%  {step * samples / total:6.0f} cycles")


def top_reasons(reasons, n=3):
    return ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:n])


def instance(function):
    """A function's template arguments, shortened to what tells its instances apart."""
    args = function[function.find("<"):function.rfind(">") + 1] if "<" in function else ""
    return args if len(args) <= 60 else "..." + args[-57:]


def summarise(lines, kernel, top):
    total = sum(v[0] for v in lines.values()) or 1
    by_reason = collections.Counter()
    for _, _, reasons in lines.values():
        by_reason.update(reasons)
    print(f"{kernel}: {total} samples; by reason: " +
          ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_reason.most_common(10)))
    for where, (samples, source, reasons) in sorted(lines.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{100 * samples / total:5.1f}%  {where}  {source}  | {top_reasons(reasons)}")


def diff(a, b, top):
    ta, tb = (sum(v[0] for v in r.values()) or 1 for r in (a, b))
    print(f"share of launch 1 ({ta} samples) - share of launch 2 ({tb}), by line")
    rows = []
    for where in set(a) | set(b):
        sa, sb = a.get(where, (0,))[0] / ta, b.get(where, (0,))[0] / tb
        source, reasons = (a.get(where) or b.get(where))[1:]
        rows.append((sa - sb, sa, sb, where, source, reasons))
    for d, sa, sb, where, source, reasons in sorted(rows, key=lambda r: -abs(r[0]))[:top]:
        print(f"{100 * d:+6.2f}  ({100 * sa:5.2f} / {100 * sb:5.2f})  {where}  {source[:70]}  | {top_reasons(reasons)}")


if __name__ == "__main__":
    argv = sys.argv[1:]
    target = None
    if "--sites" in argv:
        at = argv.index("--sites")
        target = argv[at + 1]
        del argv[at:at + 2]
    options = {}
    for name in ("--steps", "--sms", "--consumer-warps"):
        if name in argv:
            at = argv.index(name)
            options[name] = argv[at + 1]
            del argv[at:at + 2]
    args = [a for a in argv if a != "--diff"]
    path, kernel, top = args[0], args[1], int(args[2]) if len(args) > 2 else 25
    if "--steps" in options:
        cycles = [float(c) for c in options["--steps"].split(",")]
        for launch, instrs in enumerate(instructions(path, kernel)[:len(cycles)]):
            print(f"launch {launch}: ", end="")
            steps(instrs, cycles[launch], int(options.get("--sms", 132)), int(options.get("--consumer-warps", 8)))
        sys.exit()
    if target:
        for instrs in instructions(path, kernel):
            sites(instrs, target, top)
        sys.exit()
    results = launches(path, kernel)
    if "--diff" in sys.argv:
        if len(results) < 2:
            raise SystemExit(f"--diff needs two launches of {kernel!r}, found {len(results)}")
        diff(results[0][1], results[1][1], top)
    else:
        for launch, (function, lines) in enumerate(results):
            print(f"launch {launch}: {instance(function)}")
            summarise(lines, kernel, top)
