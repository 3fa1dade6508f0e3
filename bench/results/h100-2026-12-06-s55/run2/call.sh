# Session 55, run 2 (H100; the call named nvidia-h200): from the repository root with the gitignored
# .after-s54/ carried (m.so.xz: main's library at 407d363, every head dim), Nsight Compute over one
# backward call of ours (the Hopper kernel) and of cuDNN at 192 / 128, causal and not, 8k x 2, 16 heads:
python3 -c "
import lzma,pathlib
p=pathlib.Path('.after-s54/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('.after-s54/m.so.xz').read_bytes()))"
export GPU_DEADLINE_AT=$(( $(date +%s) + 380 ))
python3 scripts/gpu.py --out $OUT/p profile backward --lib .after-s54/m.so --shapes "d192v128c8k d192v128n8k" --impls "ours_sm90 cudnn" --timeout 360
