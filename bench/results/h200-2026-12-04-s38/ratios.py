"""Main-kernel CUPTI times of a run's kernels.txt (kernels.py, rounds alternating per library): the mean over
rounds per library and shape, and each one's ratio to the first library's (main's) default-mode kernel of the
same shape.
Usage: python3 ratios.py run1/kernels.txt"""
import re, collections, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); lib = shape = None
for l in open(sys.argv[1]):
    m = re.match(r'#### (\S+) round', l)
    if m: lib = m.group(1); continue
    m = re.match(r'== ours bwd (det )?\s*(\S+ \S+ \S+):', l)
    if m: shape = ('det ' if m.group(1) else '') + m.group(2); continue
    m = re.search(r'([\d.]+) us\s+grid\s+\[\s*(\d+)', l)
    if m and shape and lib and 'bwd_kernel_sm90' in l: d[lib][shape].append(float(m.group(1)))
libs = list(d)
print(f"{'shape':30s}" + "".join(f"{x:>15s}" for x in libs))
base_lib = libs[0]
for sh in d[base_lib]:
    base = sh[4:] if sh.startswith('det ') else sh
    ref = sum(d[base_lib][base]) / len(d[base_lib][base])
    cells = []
    for x in libs:
        v = d[x].get(sh)
        cells.append(f"{sum(v)/len(v):8.0f} {ref/(sum(v)/len(v)):5.2f}" if v else " " * 15)
    print(f"{sh:30s}" + "".join(f"{c:>15s}" for c in cells))
print(f"(us, then {base_lib}'s default-mode kernel time over this one: the speed relative to its default)")
