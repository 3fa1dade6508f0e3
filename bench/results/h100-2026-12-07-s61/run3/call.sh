#!/bin/bash
# Run on the warm machine of run2 (build-m: main 39ca325's library, d128 / d256, sm_90), carrying .after-s61.
export GPU_DEADLINE_AT=$(( $(date +%s) + 250 )) FLASHATTN_COMMIT=$(cat .after-s61/m.commit)
python3 scripts/gpu.py --out $OUT/b bench backward --lib build-m/src/libflashattn.so --timeout 240 -- --hdims 128,256 --shapes gqa --seqlens 4096,16384 --alternate 3 --variant walk:backward_gqa=kv_major --variant pairs:backward_gqa=kv_pairs | tail -14
