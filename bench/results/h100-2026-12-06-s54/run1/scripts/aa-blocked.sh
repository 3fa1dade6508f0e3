#!/bin/bash
# Session 54: the --lib bias at 16k, by timing order. A/A: m as ours, a copy of m as --lib a, d128 at 16k
# (MHA, 32/8, 64/8; causal and not), --alternate 3 --rounds 40, twice in each order, interleaved:
# M = main's mirrored de Bruijn order (bench_common_mirrored.py), B = the branch's blocked_order.
# Predicted (tests/gpu/test_bench_timing.py's clock model): a / ours ~1.01-1.02 with M, 1.000 +- 0.005 with B.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-420} ))
S=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$S/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/m.so.xz').read_bytes()))"
cp $S/m.so $S/a.so
cp bench/bench_common.py $S/bench_common_blocked.py
export FLASHATTN_COMMIT=$(cat $S/m.commit)
for run in M1 B1 M2 B2; do
  case $run in M*) cp $S/bench_common_mirrored.py bench/bench_common.py;; B*) cp $S/bench_common_blocked.py bench/bench_common.py;; esac
  python3 scripts/gpu.py --out $OUT/$run bench forward --lib $S/m.so --timeout 100 -- --hdims 128 --seqlens 16384 --alternate 3 --rounds 40 --lib a:$S/a.so > $OUT/$run.log 2>&1
  python3 - $OUT/$run/h200-forward.csv $run <<'PY'
import csv,sys,math
r=[(x['nheads'],x['nheads_k'],x['causal'],float(x['ours_a_tflops'])/float(x['ours_tflops'])) for x in csv.DictReader(open(sys.argv[1]))]
g=math.exp(sum(math.log(v) for *_,v in r)/len(r))
print(sys.argv[2],'a/ours',' '.join(f'{h}/{k}{"c" if c=="True" else ""}:{v:.3f}' for h,k,c,v in r),f'gmean {g:.4f}')
PY
done
cp $S/bench_common_blocked.py bench/bench_common.py
cd $OUT && tar czf aa.tgz M1 B1 M2 B2 && rm -rf M1 B1 M2 B2
