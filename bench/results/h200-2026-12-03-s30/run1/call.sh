#!/bin/bash
# Device call: main 5390758 (every head dim, archs 90, built on the 2-core machine): the backward's
# and value-dim / sink GPU tests, memcheck over GQA's scratch (192 / 128 included), the features
# bench (192 / 128 against cuDNN), d128 GQA's group walk against the scratch with its adds, and the
# full backward grid; where deterministic mode's consumers wait (Nsight, d128 4k).
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=5390758
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-s30a/main.xz") as src, open(".after-s30a/main.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s30a/main.so
G="python3 scripts/gpu.py --out $OUT"
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds
$G pytest tests/gpu/test_backward.py --lib $L --name bwd
$G pytest tests/gpu/test_backward.py --lib $L --name bwd-mc --sanitize memcheck -k "gqa_schemes and scratch"
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds-mc --sanitize memcheck -k "192_128_short and gqa4"
python3 scripts/gpu.py --out $OUT/feat bench features --lib $L --show 30 -- --quick --kinds value_dim --rounds 2
python3 scripts/gpu.py --out $OUT/walk bench backward --lib $L --show 30 -- --quick --shapes gqa --hdims 128 --seqlens 1024,2048,4096 --rounds 2 --variant scratch:backward_gqa=scratch
$G bench backward --lib $L --show 70
# Where deterministic mode's consumers wait (d128, 4k): the ordered dQ's kernel, then the default's.
$G profile backward --lib $L --shapes d128n4k --impls ours_det --export pd
python3 bench/ncu_stalls.py $OUT/pd-ours-source.csv bwd_kernel_sm90 40 > $OUT/stalls-bwd-det-d128-4k.txt 2>&1
$G profile backward --lib $L --shapes d128n4k --impls ours_sm90 --export pn
python3 bench/ncu_stalls.py $OUT/pn-ours-source.csv bwd_kernel_sm90 40 > $OUT/stalls-bwd-default-d128-4k.txt 2>&1
rm -f $OUT/p?-ours.ncu-rep $OUT/p?-ours-source.csv
cat $OUT/feat/summary.txt $OUT/walk/summary.txt >> $OUT/summary.txt
cd $OUT && tar czf all.tgz --exclude=all.tgz --exclude=h200-backward.csv --exclude=h200-backward.png --exclude=summary.txt . && find . -mindepth 1 ! -name all.tgz ! -name h200-backward.csv ! -name h200-backward.png ! -name summary.txt -delete
cat summary.txt
