#!/bin/bash
# Session 52 exp 1. x = branch fwd-streamed-keys (d128 only): the Hopper forward's streamed schedule
# (keys streamed round a head, the consumers' 64-row blocks half a head's keys apart), forced by the
# override forward_stream_tiles=N (N query tiles a unit); without it x runs main's tile schedule.
# Tests with x: test_forward's streamed, dense and short cases; memcheck over two streamed cases;
# then the d128 forward grid with x, the streamed schedule as variants s2 / s4 / s8, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s52
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['x.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/x.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x --timeout 150 -k "streamed or dense or short or sink"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x-memcheck --sanitize memcheck --timeout 80 -k "streamed and (512x640 or 384x513) and bf16"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/x.so --timeout 300 -- --hdims 128 --alternate 3 --variant s2:forward_stream_tiles=2 --variant s4:forward_stream_tiles=4 --variant s8:forward_stream_tiles=8 | tail -40
cd $OUT && tar czf all.tgz t f && rm -rf t f
