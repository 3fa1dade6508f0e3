#!/bin/bash
# Call B. RR (branch fwd-narrow-diagonal: at d128 a consumer whose rows see only the first half of its
# first key block computes that block's S and P V over the half) against main (409a03f).
# (1) tests/gpu/test_forward.py whole and test_inference.py on rr; memcheck over the narrowed-block,
#     end-aligned and window cases;
# (2) the forward grid at d128 (MHA 16/16, GQA 32/8 and 64/8, causal and not, 1k-16k), rr and main
#     interleaved, two rounds: d128 causal should gain (1k +3-5%), the dense rows equal (d64 and d256 run the code of main).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s44
export FLASHATTN_COMMIT=$(cat $B/rr.commit)
python3 -c "
import lzma,pathlib
for n in ['main','rr']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_forward.py --lib $B/rr.so --name fwd-rr --timeout 150
$G pytest tests/gpu/test_inference.py --lib $B/rr.so --name inf-rr --timeout 100
$G pytest tests/gpu/test_forward.py --lib $B/rr.so --name fwd-rr-memcheck --sanitize memcheck --timeout 150 \
   -k "diagonal_block_half or end_aligned or local_window or dense"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/b bench forward --lib $B/rr.so --compare main:$B/main.so --timeout 240 -- \
   --rounds 2 --hdims 128 | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz b && rm -rf t b
