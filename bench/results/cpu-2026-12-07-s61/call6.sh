#!/bin/bash
# On the device (about 180 s), carrying .after-s61: n = the working tree (the planner's GQA walk up to
# 8192 keys) for d128 / d256 on sm_90; n's GQA backward tests; the GQA backward rows at SEQLENS (4k)
# with main's choice there forced as a variant column (backward_gqa=scratch), --alternate 3.
D=.after-s61
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-190} )) FLASHATTN_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo bwd-gqa-walk-longer)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
[ -d third_party/cutlass ] || tar xzf $D/cutlass.tgz
N=build-n/src/libflashattn.so
python3 scripts/gpu.py --out $OUT/k build --name n --build-dir build-n --headdims 128,256 --archs 90 --timeout 150
[ -f $N ] || { echo "the build failed"; exit 1; }
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $N --name bwd-n --timeout 40 -k "gqa and not 64" | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $N --timeout 90 -- --hdims 128,256 --shapes gqa --seqlens ${SEQLENS:-4096} --alternate 3 --variant scratch:backward_gqa=scratch | tail -8
