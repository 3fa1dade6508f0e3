"""Kernel time per call (all kernels, CUPTI) of each library in kernels.py's output, with the ratio of the
first library's to each other's (> 1: the other is faster). Usage: totals.py kernels.txt"""
import re, sys, collections
t = collections.defaultdict(lambda: collections.defaultdict(list))  # label -> lib -> [us]
libs = []
lib = None
for line in open(sys.argv[1]):
    m = re.match(r"#### (\S+) round", line)
    if m:
        lib = m.group(1)
        if lib not in libs: libs.append(lib)
        continue
    m = re.match(r"== (.*): ([0-9.]+) us of kernels per call", line)
    if m and lib: t[m.group(1).strip()][lib].append(float(m.group(2)))
print(f"{'call':40s} " + " ".join(f"{l:>10s}" for l in libs) + "   " + " ".join(f"{libs[0]}/{l}" for l in libs[1:]))
for label, per in t.items():
    best = {l: min(v) for l, v in per.items()}
    row = f"{label:40s} " + " ".join(f"{best.get(l, float('nan')):10.1f}" for l in libs)
    row += "   " + " ".join(f"{best[libs[0]] / best[l]:.3f}" for l in libs[1:] if l in best and libs[0] in best)
    print(row)
