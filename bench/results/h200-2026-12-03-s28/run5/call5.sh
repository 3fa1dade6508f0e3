# device call: branch fwd-merged-edges (25a0dc0, deleted) at 128, archs 90; where its 16k and 1k
# calls spend their time (Nsight source page), to compare with main's from run 1.
export GPU_DEADLINE_AT=$(( $(date +%s) + 400 ))
R=$OUT/r; G=scripts/gpu.py; mkdir -p $R
export FLASHATTN_COMMIT=25a0dc0
python3 $G --out $R build --source .after-edges --build-dir build-e --name edges --headdims "128" --archs 90
python3 $G --out $R profile forward --lib build-e/src/libflashattn.so --shapes "d128n1k d128n16k" --impls "ours_sm90" --export pe --timeout 120
python3 $G --out $R summary
cd $OUT && tar czf r.tgz r && rm -rf r
