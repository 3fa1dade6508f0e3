#!/bin/bash
# Session 48 call TN (device time short: calls T and N in one; inference_tests and n.so left out, the
# working tree and the carried files must stay under 64 MiB). T: main's C++ test binaries (built on the
# CPU machine, archs 90, statically linked; t.commit): the CUDA cases (Cuda*) of backend_tests and
# inference_tests, sharded; compute-sanitizer memcheck over Cuda/RandomCombination; the package's
# dropout and accuracy tests (tests/python) on main's library (m.so). N: the narrowed diagonal block on
# the shared-memory-Q forward (n2.so: S over the half, P V whole; n.so: both over the half) against
# main (m.so): test_forward's half-diagonal (d128 / d64 / d96), head-dim and end-aligned cases with n2,
# then the forward at d64 and d128 (d128's machine code is the same in both: the control), main as ours
# with n2 compared, three rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-580} ))
B=.after-s48
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
for n in backend_tests; do xz -dc $B/$n.xz > $B/$n && chmod +x $B/$n; done
python3 -c "
import lzma,pathlib
for n in ['m','n2']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
mkdir -p $OUT/t
start=$(date +%s)
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 100 $B/backend_tests --gtest_filter='Cuda*' \
    > $OUT/t/backend-$i.log 2>&1 &
done
wait
echo "cases: $(( $(date +%s) - start )) s" > $OUT/summary.txt
for f in $OUT/t/*.log; do
  echo "$(basename $f): $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? ran' $f | tr '\n' ' ')" >> $OUT/summary.txt
  grep -E '^\[  FAILED  \]' $f | head -20 >> $OUT/summary.txt
done
cat $OUT/summary.txt
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/ab bench forward --lib $B/m.so --compare narrow_s:$B/n2.so --timeout 80 -- --shapes mha --hdims 64,128 --seqlens 1024,2048 --rounds 3 | tail -12
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/n2.so --name fwd-n2 --timeout 35 -k "diagonal or head_dims or end_aligned"
tail -1 $OUT/t/summary.txt
start=$(date +%s)
(cd tests/python && FLASHATTN_LIBRARY=$PWD/../../$B/m.so PYTHONPATH=$PWD/../../python timeout 50 python3 -m pytest -q \
  -p no:cacheprovider test_dropout.py test_accuracy.py > $OUT/t/pytest-python.log 2>&1)
echo "tests/python dropout+accuracy: rc=$? $(( $(date +%s) - start )) s $(tail -1 $OUT/t/pytest-python.log)" >> $OUT/summary.txt
start=$(date +%s)
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 $B/backend_tests \
  --gtest_filter='Cuda/RandomCombination*' > $OUT/t/memcheck-random.log 2>&1
echo "memcheck random: rc=$? $(( $(date +%s) - start )) s $(grep -E 'ERROR SUMMARY|PASSED|FAILED  \]' $OUT/t/memcheck-random.log | tr '\n' ' ')" >> $OUT/summary.txt
cat $OUT/summary.txt
cd $OUT && cp t/summary.txt summary-all.txt; tar czf tests.tgz t && tar czf ab.tgz ab && rm -rf t ab
