#!/bin/bash
# Next session, call A. Two versions of the dQ conversion against main (d39562d, session 40's library):
#   dq3 = branch bwd-dq-in-kernel (49f4f4b): converted by each item's last CTA, staged through shared memory by cp.async;
#   dq4 = branch bwd-dq-dependent (fcfb5b6): the kernel's CTAs count themselves done per item, the finishing pass runs
#         as its programmatic dependent and converts each item once counted (the main grid's last wave).
# (1) test_backward, test_value_dim_sink and memcheck (conversion / varlen / ordered-varlen / empty tests) on both;
# (2) the full backward grid (d64 / d128 / d256, MHA and GQA, 1k-16k, default and deterministic), wall clock per call,
#     main, dq3 and dq4 interleaved, two rounds (session 40: one library's grid took 80 s).
# (A kernel-time probe cannot judge dq4: its pass overlaps the main kernel.)
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
B=.after-s41
export FLASHATTN_COMMIT=$(cat $B/dq4.commit)
python3 -c "
import lzma,pathlib
for n in ['main','dq3','dq4']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
G="python3 scripts/gpu.py --out $OUT/t"
# (Run from branch bwd-dq-dependent's tree: its test_dq_conversion* use dq4's override values, overlapped / after;
# dq3's library knows in_kernel / separate, so dq3 runs every other test, which converts in its kernel by default.)
for v in dq3 dq4; do
  K=""; [ $v = dq3 ] && K="not dq_conversion"
  $G pytest tests/gpu/test_backward.py --lib $B/$v.so --name bwd-$v --timeout 100 ${K:+-k "$K"}
  $G pytest tests/gpu/test_value_dim_sink.py --lib $B/$v.so --name vds-$v --timeout 60 -k backward
  M="ordered_dq_varlen or (varlen and not seqused) or empty"; [ $v = dq4 ] && M="dq_conversion or $M"
  $G pytest tests/gpu/test_backward.py --lib $B/$v.so --name bwd-$v-memcheck --sanitize memcheck --timeout 120 -k "$M"
done
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/dq4.so --compare main:$B/main.so --compare dq3:$B/dq3.so -- --rounds 2 | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz b && rm -rf t b
