#!/bin/bash
# Session 45 call F. nd = branch fwd-narrow-d64 (over bwd-pairs-det: the pairs' walk in deterministic mode with rows
# per pair; and the d64 forward's diagonal block at half width), pairs = the control (bwd-walk-split's library).
# (1) nd: test_forward whole, test_backward's GQA and deterministic cases, memcheck over the d64 half-diagonal and
# the pairs' cases; (2) the GQA backward grid 1k-4k, deterministic with kv_pairs as a variant, two rounds;
# (3) the d64 forward (MHA 32/32, 1k-4k) nd against pairs in both role orders, three rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s45
export FLASHATTN_COMMIT=$(cat $B/nd.commit)
python3 -c "
import lzma,pathlib
for n in ['nd','pairs']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_forward.py --lib $B/nd.so --name fwd-nd --timeout 40
$G pytest tests/gpu/test_backward.py --lib $B/nd.so --name bwd-nd --timeout 40 -k "gqa or deterministic"
$G pytest tests/gpu/test_forward.py --lib $B/nd.so --name fwd-nd-memcheck --sanitize memcheck --timeout 50 -k "diagonal_block_half and 64"
$G pytest tests/gpu/test_backward.py --lib $B/nd.so --name bwd-nd-memcheck --sanitize memcheck --timeout 50 -k "kv_pairs"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/nd.so --timeout 70 -- --hdims 128,256 --shapes gqa \
   --seqlens 1024,2048,4096 --rounds 2 --det-variant dpairs:backward_gqa=kv_pairs | tail -2
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/nd.so --compare main:$B/pairs.so --timeout 35 -- \
   --hdims 64 --shapes mha --seqlens 1024,2048,4096 --rounds 3 | tail -2
python3 scripts/gpu.py --out $OUT/g bench forward --lib $B/pairs.so --compare nd:$B/nd.so --timeout 35 -- \
   --hdims 64 --shapes mha --seqlens 1024,2048,4096 --rounds 3 | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz b f g && rm -rf t b f g
