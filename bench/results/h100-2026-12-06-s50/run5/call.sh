#!/bin/bash
# Session 50 call 4: the timing methods' noise floor, A/A. main's library (m.so) as ours and again as
# "a" (a second handle on the same file: identical code), d128 MHA and GQA 64/8 at 1k / 4k / 16k,
# causal and not; backward and forward, by the balanced alternation
# (--alternate 3, 20 alternations). Any ours / a other than 1 is the method's.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-400} ))
B=.after-s50
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
cp $B/m.so $B/a.so
export FLASHATTN_COMMIT=$(cat $B/m.commit)
G="--shapes mha,gqa --hdims 128 --seqlens 1024,4096,16384"
for d in backward forward; do
  python3 scripts/gpu.py --out $OUT/$d-alt bench $d --lib $B/m.so --compare a:$B/a.so --timeout 120 -- $G --alternate 3 | grep -E "^ *128|ours/a" | tail -18
done
cd $OUT && tar czf all.tgz backward-alt forward-alt && rm -rf backward-alt forward-alt
# as run: DEADLINE=280 bash .after-s50/call4.sh (run tool, carry .after-s50; the bench scripts of the working tree then, committed after it)
