#!/bin/bash
# Session 46 call B: er3 = branch fwd-early-rows3 (the forward's rows' factors and lse, and on the static
# schedule the next tile's decode, while the last P V runs) against m = main 8e494cf: er3's forward tests and
# memcheck, then the forward grid 1k-4k (d64, d128, d256, MHA and GQA), three rounds, in both role orders.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-575} ))
B=.after-s46
export FLASHATTN_COMMIT=er3
python3 -c "
import lzma,pathlib
for n in ['m','er3']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_forward.py --lib $B/er3.so --name fwd --timeout 60
$G pytest tests/gpu/test_value_dim_sink.py --lib $B/er3.so --name vds --timeout 40
$G pytest tests/gpu/test_inference.py --lib $B/er3.so --name inf --timeout 40
$G pytest tests/gpu/test_forward.py --lib $B/er3.so --name fwd-memcheck --sanitize memcheck --timeout 60 -k "dense or varlen or end_aligned or diagonal or window or gqa"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/er3.so --compare main:$B/m.so --timeout 100 -- \
   --seqlens 1024,2048,4096 --rounds 3 | tail -2
python3 scripts/gpu.py --out $OUT/g bench forward --lib $B/m.so --compare er3:$B/er3.so --timeout 100 -- \
   --seqlens 1024,2048,4096 --rounds 3 | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz f g && rm -rf t f g
