#!/bin/bash
# On the device (about 250 s with the library carried, 450 s building it), carrying .after-s61: branch
# exp-fwd-sections (main + the override forward_section_mb), d64 / d128 / d256 on sm_90: .after-s61/s.so.xz
# if it is there (built here), else built on the device. The forward's causal rows at 1k / 2k (the
# non-causal rows are the A/A controls: no sections without a mask) with the masked tile order's
# section at 4 / 64 MB, one pair (0.0001 MB: heaviest-first per pair) and the whole grid (1e5 MB:
# heaviest-first over every tile), against the planner's 16 MB, --alternate 3.
# Pass the measured commit: FLASHATTN_COMMIT=<branch head> on the command line.
D=.after-s61
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} )) FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$(cat $D/s.commit 2>/dev/null)}
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
L=$D/s.so.xz
if [ ! -f $L ]; then
    [ -d third_party/cutlass ] || tar xzf $D/cutlass.tgz
    L=build-s/src/libflashattn.so
    python3 scripts/gpu.py --out $OUT/k build --name s --build-dir build-s --headdims 64,128,256 --archs 90 --timeout 260
    [ -f $L ] || { echo "the build failed"; exit 1; }
fi
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --timeout 280 -- --seqlens 1024,2048 --alternate 3 \
  --variant s4:forward_section_mb=4 --variant s64:forward_section_mb=64 --variant pair:forward_section_mb=0.0001 \
  --variant all:forward_section_mb=100000 | tail -28
