#!/bin/bash
# Session 58 second call: main's library (m, 407d363's CUDA code) on issue 27's tests: the whole test_value_dim_sink,
# then memcheck over its 192 / 128 and sink cases.
S=.after-s57
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-400} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$S/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/m.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t $OUT/mc
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $S/m.so --name m --timeout 70 2>&1 | tail -3
python3 scripts/gpu.py --out $OUT/mc pytest tests/gpu/test_value_dim_sink.py --lib $S/m.so --name mmc --sanitize memcheck --timeout 80 -k "backward_192_128_short or backward_192_128_varlen or backward_192_128_deterministic or sink_features" 2>&1 | tail -3
grep -h -E "ERROR SUMMARY|passed|failed" $OUT/t/*.log $OUT/mc/*.log 2>/dev/null | sort | uniq -c | head
# Then the d256 deterministic rows under the planner's other GQA choices (issue 25; no build): the whole
# group's walk, the pairs (the planner's choice at 32/4 causal up to 4k keys) and the scratch.
python3 scripts/gpu.py --out $OUT/d bench backward --lib $S/m.so --timeout ${DET_TIMEOUT:-170} -- --hdims 256 --shapes gqa --seqlens 1024,2048 --alternate 3 --det-variant walk:backward_gqa=kv_major --det-variant pairs:backward_gqa=kv_pairs --det-variant scratch:backward_gqa=scratch 2>&1 | tail -12
