#!/bin/bash
# On the device (about 420 s), after prep.sh, carrying .after-s61: builds main (the tree) and y (main +
# dkv-sums-default.patch: GQA's dK / dV summed in the kernel by a key block's last unit, deterministic
# and the default pairs' walk) for d128 / d256 on sm_90 side by side, then y's deterministic and GQA
# backward tests, the GQA backward rows at 1k / 2k / 4k (m as ours, y as --lib, --alternate 3) and
# memcheck on the pairs' cases (cut by the deadline if short).
D=.after-s61
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-450} )) FLASHATTN_COMMIT=$(cat $D/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
[ -d third_party/cutlass ] || tar xzf $D/cutlass.tgz
rm -rf build-src-y && mkdir build-src-y
tar cf - CMakeLists.txt include src tools tests examples python pyproject.toml | tar xf - -C build-src-y
tar xzf $D/y-src.tgz -C build-src-y
python3 scripts/gpu.py --out $OUT/k build --name m --build-dir build-m --headdims 128,256 --archs 90 --timeout 240 &
python3 scripts/gpu.py --out $OUT/k build --name y --source build-src-y --build-dir build-y --headdims 128,256 --archs 90 --timeout 240 &
wait
M=build-m/src/libflashattn.so; Y=build-y/src/libflashattn.so
[ -f $M ] && [ -f $Y ] || { echo "a build failed"; exit 1; }
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $Y --name bwd-y --timeout 90 -k "(deterministic or gqa) and not 64" | tail -1
grep -E "^FAILED|^E  " $OUT/t/bwd-y.log | head -8
python3 scripts/gpu.py --out $OUT/b bench backward --lib $M --timeout 130 -- --hdims 128,256 --shapes gqa --seqlens 1024,2048,4096 --alternate 3 --lib y:$Y | tail -20
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $Y --name bwd-y-memcheck --sanitize memcheck --timeout 60 -k "pairs_at_groups or (gqa_schemes and kv_pairs and 128)" | tail -1
