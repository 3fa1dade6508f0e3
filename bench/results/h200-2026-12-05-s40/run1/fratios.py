"""Forward kernel time per call (kernels.py's '== ours fwd ...: T us of kernels per call'), mean over rounds per
library and shape, and the first library's time over each one's. Usage: python3 fratios.py fwd-kernels128.txt"""
import re, collections, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); lib = None
for l in open(sys.argv[1]):
    m = re.match(r'#### (\S+) round', l)
    if m: lib = m.group(1); continue
    m = re.match(r'== ours fwd\s+(\S+ \S+ \S+): ([\d.]+) us', l)
    if m and lib: d[lib][m.group(1)].append(float(m.group(2)))
libs = list(d)
print(f"{'shape':30s}" + "".join(f"{x:>15s}" for x in libs))
for sh in d[libs[0]]:
    ref = sum(d[libs[0]][sh]) / len(d[libs[0]][sh])
    print(f"{sh:30s}" + "".join(f"{sum(v)/len(v):8.1f} {ref/(sum(v)/len(v)):5.3f}" if (v := d[x].get(sh)) else " " * 15 for x in libs))
