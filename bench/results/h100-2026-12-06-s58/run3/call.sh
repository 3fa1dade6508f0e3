#!/bin/bash
# Session 58 third call: second58.sh's memcheck again with a longer limit (80 s there timed out at 38
# of its 50 cases). m = main's library (407d363's CUDA code), decompressed from .after-s57/m.so.xz.
S=.after-s57; python3 -c "
import lzma,pathlib
p=pathlib.Path('$S/m.so'); p.write_bytes(lzma.decompress(pathlib.Path('$S/m.so.xz').read_bytes()))"; export GPU_DEADLINE_AT=$(( $(date +%s) + 280 )); export FLASHATTN_COMMIT=$(cat $S/m.commit); mkdir -p $OUT/mc; python3 scripts/gpu.py --out $OUT/mc pytest tests/gpu/test_value_dim_sink.py --lib $S/m.so --name mmc --sanitize memcheck --timeout 260 -k "backward_192_128_short or backward_192_128_varlen or backward_192_128_deterministic or sink_features" 2>&1 | tail -3; grep -h -E "ERROR SUMMARY|passed|failed" $OUT/mc/*.log | sort | uniq -c
