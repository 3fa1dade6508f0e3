#!/bin/bash
# Session 50 run 3, as it ran (one line in the run tool, kind nvidia-h100-x1, carry .after-s50):
# Nsight Compute over main's backward (m.so), default and deterministic, d256 causal 2k, GQA 32/4 and
# MHA 8/8, with the source page exported (det256-ours-source.csv, 42 MB, not kept: its per-line stall
# summaries are in stalls.txt, made here by bench/ncu_stalls.py and the diff below it).
B=.after-s50; python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"; export GPU_DEADLINE_AT=$(( $(date +%s) + 280 )); python3 scripts/gpu.py --out $OUT/p profile backward --lib $B/m.so --shapes "d256c2kg32x4 d256c2k" --impls "ours_sm90 ours_det" --export det256 --timeout 250 | tail -5; ls -la $OUT/p; cd $OUT && tar czf p.tgz --exclude='*.ncu-rep' p && rm -rf p
