# device call: main (192) and branch bwd-192-n96 (192;256) built side by side, then the branch's
# value-dim tests, the features bench against main, d256 tests, sanitizer, smoke, profile.
export GPU_DEADLINE_AT=$(( $(date +%s) + 570 ))
R=$OUT/r; G=scripts/gpu.py; mkdir -p $R
FLASHATTN_COMMIT=7ad54d2 python3 $G --out $R build --build-dir build-m --name main --headdims "192" --archs 90 > /dev/null &
export FLASHATTN_COMMIT=ecf83ce
python3 $G --out $R build --source .after-n96 --build-dir build-n96 --name n96 --headdims "192;256" --archs 90
wait
L=build-n96/src/libflashattn.so
python3 $G --out $R pytest .after-n96/tests/gpu/test_value_dim_sink.py --lib $L --name vd-n96 --timeout 120
python3 $G --out $R bench features --lib $L --compare main:build-m/src/libflashattn.so -- --quick --kinds value_dim --rounds 3 --out $R/feat
python3 $G --out $R pytest .after-n96/tests/gpu/test_backward.py -k "256 or 192" --lib $L --name bwd-n96 --timeout 90
python3 .after-n96/scripts/gpu.py --out $R sanitize-cli --build-dir $PWD/build-n96 --tools memcheck
python3 .after-n96/scripts/gpu.py --out $R smoke --build-dir $PWD/build-n96
python3 $G --out $R profile backward --lib $L --shapes "d192v128c4k" --impls "ours_sm90 cudnn" --export p --timeout 150
python3 $G --out $R summary
cd $OUT && tar czf r.tgz r && rm -rf r
