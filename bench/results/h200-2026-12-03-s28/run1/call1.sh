# device call: branch bwd-causal-tail (main 809cfe4 + the key-major tail) at 64;128;256, archs 90;
# the tail's A/B against backward_order=pairs in one process, d128 causal tests, a d64 causal 1k
# forward profile against cuDNN.
export GPU_DEADLINE_AT=$(( $(date +%s) + 570 ))
R=$OUT/r; G=scripts/gpu.py; mkdir -p $R
export FLASHATTN_COMMIT=4562818
python3 $G --out $R build --source .after-tail --build-dir build-t --name tail --headdims "64;128;256" --archs 90
L=build-t/src/libflashattn.so
python3 $G --out $R bench backward --lib $L -- --quick --hdims 128,256 --seqlens 1024,2048,4096 --rounds 3 --variant pairs:backward_order=pairs --out $R/tail
python3 $G --out $R profile forward --lib $L --shapes "d64c1k" --impls "ours_sm90 cudnn" --export pf --timeout 100
python3 $G --out $R profile forward --lib $L --shapes "d128n1k d128n16k" --impls "ours_sm90" --export pq --timeout 100
python3 $G --out $R pytest .after-tail/tests/gpu/test_backward.py -k "causal" --lib $L --name bwd-tail --timeout 100
python3 $G --out $R summary
cd $OUT && tar czf r.tgz r && rm -rf r
