#!/bin/bash
# Session 55 (prepared, not run): x4 = main (192 only) whose 192 / 128 default backward hands dQ off in the box layout and
# adds it by bulk tensor reductions from one producer thread (as the ordered dQ does), instead of a
# bulk reduction per padded row from 64 threads. Tests, the value_dim rows (m ours, x4 --lib), and the
# L2 sectors of x4's kernel at 192 / 128 causal 8k.
S=.after-s55
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x4.so']:
    p=pathlib.Path('$S/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $S/x4.so --name x4 --timeout 90 -k "backward_192_128 or value_head_dim" | tail -2
python3 scripts/gpu.py --out $OUT/x bench features --lib $S/m.so --timeout 100 -- --kinds value_dim --alternate 3 --lib x4:$S/x4.so | tail -14
M=lts__t_sectors_op_read.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_write.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum
python3 scripts/gpu.py --out $OUT/m profile backward --lib $S/x4.so --shapes "d192v128c8k" --impls "ours_sm90" --timeout 60 --ncu-args "--metrics $M" | tail -1
grep -E "lts__t_sectors_op_red|Duration" $OUT/m/profile-backward.log | head -6
