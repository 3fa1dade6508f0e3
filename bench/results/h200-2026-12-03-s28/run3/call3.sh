# device call: main (the key-major tail merged) at 64;128;192;256, archs 90: the full backward grid
# (top-level h200-backward.csv), the backward tests, memcheck over the CLI problems, smoke.
export GPU_DEADLINE_AT=$(( $(date +%s) + 565 ))
R=$OUT/r; G=scripts/gpu.py; mkdir -p $R
export FLASHATTN_COMMIT=$(cat .after-main/.commit)
python3 $G --out $R build --source .after-main --build-dir build-m --name main --headdims "64;128;192;256" --archs 90
L=build-m/src/libflashattn.so
python3 $G --out $R bench backward --lib $L -- --out $R/bwd
python3 $G --out $R pytest .after-main/tests/gpu/test_backward.py --lib $L --name bwd --timeout 120
python3 .after-main/scripts/gpu.py --out $R sanitize-cli --build-dir $PWD/build-m --tools memcheck
python3 .after-main/scripts/gpu.py --out $R smoke --build-dir $PWD/build-m
python3 $G --out $R summary
cd $OUT && tar czf r.tgz r && rm -rf r
