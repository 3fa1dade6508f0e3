"""Where a kernel's warps stall, by CUDA source line, from an Nsight Compute source page.

    python3 bench/ncu_stalls.py REPORT-source.csv KERNEL_SUBSTRING [TOP]

REPORT-source.csv is what `scripts/gpu.py profile ... --export NAME` writes beside each report
(`ncu -i NAME-PASS.ncu-rep --page source --csv --print-source cuda,sass`). Prints the kernel's
stall samples by reason, then its TOP source lines (default 25) by samples with their three largest
reasons. The producer warpgroup's samples count too (its waits on the consumers show as long_sb at
its barriers), so read a line's share against the 12 warps of a Hopper CTA, 4 of them the
producer's.
"""
import collections
import csv
import sys


def summarise(path, kernel, top=25):
    file = func = header = None
    lines, reasons_total = [], collections.Counter()
    for row in csv.reader(open(path)):
        if not row:
            continue
        if row[0] == "File Path":
            file = row[1]
        elif row[0] == "Function Name":
            func = row[1]
        elif row[0] == "Line No":
            header = row
        elif header and func and kernel in func and len(row) > 2 and row[0] and row[2] == "-":  # a line's total
            cells = dict(zip(header, row))
            samples = cells.get("Warp Stall Sampling (All Samples)", "")
            if not samples.isdigit():
                continue
            reasons = {k: int(v) for k, v in cells.items()
                       if k.startswith("stall_") and "Not Issued" not in k and v.isdigit() and int(v) > 0}
            reasons_total.update(reasons)
            lines.append((int(samples), f"{file.rsplit('/', 1)[-1]}:{row[0]}", row[1].strip()[:90],
                          sorted(reasons.items(), key=lambda kv: -kv[1])[:3]))
    total = sum(s for s, *_ in lines) or 1
    print(f"{kernel}: {total} samples; by reason: " +
          ", ".join(f"{k[6:]} {100 * v / total:.1f}%" for k, v in reasons_total.most_common(10)))
    for samples, where, source, reasons in sorted(lines, reverse=True)[:top]:
        print(f"{100 * samples / total:5.1f}%  {where}  {source}  | " + ", ".join(f"{k[6:]} {v}" for k, v in reasons))


if __name__ == "__main__":
    summarise(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 25)
