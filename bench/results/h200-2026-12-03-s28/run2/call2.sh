# device call: main 37db491 and branch fwd-merged-edges (25a0dc0) at 64;128, archs 90, side by side;
# the forward A/B in one process, then the branch's forward tests.
export GPU_DEADLINE_AT=$(( $(date +%s) + 575 ))
R=$OUT/r; G=scripts/gpu.py; mkdir -p $R
FLASHATTN_COMMIT=37db491 python3 $G --out $R build --source .after-main --build-dir build-m --name main --headdims "64;128" --archs 90 > /dev/null &
export FLASHATTN_COMMIT=25a0dc0
python3 $G --out $R build --source .after-edges --build-dir build-e --name edges --headdims "64;128" --archs 90
wait
L=build-e/src/libflashattn.so
python3 $G --out $R bench forward --lib $L --compare main:build-m/src/libflashattn.so -- --quick --hdims 64,128 --rounds 3 --out $R/fwd
python3 $G --out $R pytest .after-edges/tests/gpu/test_forward.py --lib $L --name fwd-edges --timeout 150
python3 .after-edges/scripts/gpu.py --out $R smoke --build-dir $PWD/build-e
python3 $G --out $R summary
cd $OUT && tar czf r.tgz r && rm -rf r
