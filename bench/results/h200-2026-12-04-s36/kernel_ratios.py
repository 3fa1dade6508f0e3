"""Main-kernel CUPTI times of this session's A/B calls (kernels.txt of runs 2-5), mean of two rounds, and the ratio."""
import re, collections, sys
def parse(path):
    d = collections.defaultdict(lambda: collections.defaultdict(list)); lib = shape = None
    for l in open(path):
        m = re.match(r'#### (\S+) round', l)
        if m: lib = m.group(1); continue
        m = re.match(r'== ours bwd (det )?\s*(\S+ \S+ \S+):', l)
        if m: shape = ('det ' if m.group(1) else '') + m.group(2); continue
        m = re.search(r'([\d.]+) us\s+grid\s+\[\s*(\d+)', l)
        if m and 'bwd_kernel_sm90' in l and shape: d[lib][shape].append(float(m.group(1)))
    return d
for run, (a, b) in (('run2', ('main', 'new')), ('run3', ('main', 'p2')), ('run4', ('main', 'mp')), ('run5', ('main', 'p3'))):
    d = parse(f'{run}/kernels.txt')
    print(run, f'{b} / {a}')
    for sh in d[a]:
        x = sum(d[a][sh]) / len(d[a][sh]); y = sum(d[b][sh]) / len(d[b][sh])
        print(f'   {sh:28s} {x:9.1f} {y:9.1f} {y / x:6.3f}')
