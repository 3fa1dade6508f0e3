#!/bin/bash
# On the device (about 330 s), carrying .after-s61: n = the working tree (the planner's GQA walk up to
# 8192 keys, the default mode's pairs at any length) and m = the same tree with main's planner.cpp,
# d128 / d256 on sm_90 side by side; then n's GQA backward tests and the GQA backward rows at
# 4k / 8k (SEQLENS; n as ours, m as --lib, --alternate 3).
D=.after-s61
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-360} )) FLASHATTN_COMMIT=$(git rev-parse HEAD 2>/dev/null || cat $D/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
[ -d third_party/cutlass ] || tar xzf $D/cutlass.tgz
rm -rf build-src-m && mkdir build-src-m
tar cf - CMakeLists.txt include src tools tests examples python pyproject.toml | tar xf - -C build-src-m
cp $D/planner-main.cpp build-src-m/src/cuda/host/planner.cpp
python3 scripts/gpu.py --out $OUT/k build --name n --build-dir build-n --headdims 128,256 --archs 90 --timeout 240 &
python3 scripts/gpu.py --out $OUT/k build --name m --source build-src-m --build-dir build-m2 --headdims 128,256 --archs 90 --timeout 240 &
wait
N=build-n/src/libflashattn.so; M=build-m2/src/libflashattn.so
[ -f $N ] && [ -f $M ] || { echo "a build failed"; exit 1; }
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $N --name bwd-n --timeout 60 -k "gqa and not 64" | tail -1
grep -E "^FAILED|^E  " $OUT/t/bwd-n.log | head -8
python3 scripts/gpu.py --out $OUT/b bench backward --lib $N --timeout 200 -- --hdims 128,256 --shapes gqa --seqlens ${SEQLENS:-4096,8192} --alternate 3 --lib m:$M | tail -20
