#!/bin/bash
# Session 56: k128 = main (192 only) with 192 / 128's backward at 128 keys a CTA (64 a consumer; P and dS
# in one buffer, dP issued once P is in 16 bits, dV^T under the dS arithmetic). Tests (192 / 128
# backward, also deterministic), memcheck on a few, the value_dim rows (m ours, k128 --lib). k96 = main (192
# only) with only the early dV^T (96 keys, P and dS in buffers of their own): what the reorder alone gives.
S=.after-s56
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-370} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','k128.so','k96.so']:
    p=pathlib.Path('$S/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $S/k128.so --name k128 --timeout 90 -k "192_128 or (value_head_dim and 192)" | tail -3
sed -i 's/for direction in ("forward", "backward"):/for direction in ("backward",):/' bench/gpu_features.py  # the backward only (the forward is the same code)
python3 scripts/gpu.py --out $OUT/x bench features --lib $S/m.so --timeout 170 -- --kinds value_dim --alternate 3 --lib k128:$S/k128.so --lib k96:$S/k96.so | tail -14
# Where the GQA walk's dQ reductions go (32/8 causal 1k: x2 1.18x ours): L2 hit rates and DRAM bytes,
# MHA against the 32/8 walk, main's library.
M=lts__t_sector_op_red_hit_rate.pct,lts__t_sector_op_read_hit_rate.pct,lts__t_sectors_op_red.sum,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
python3 scripts/gpu.py --out $OUT/p profile backward --lib $S/m.so --shapes "d128c1k d128c1kg32x4 d128c1kg64x8" --impls "ours_sm90" --timeout 60 --ncu-args "--metrics $M" | tail -1
grep -E "hit_rate|op_red.sum|dram__bytes|gpu__time_duration|d128c1k" $OUT/p/profile-backward.log | grep -v "^\\$" | head -60
