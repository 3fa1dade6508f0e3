#!/bin/bash
# The session's first device call, carrying .after-s61: on an H200 the top-level backward records' build
# (rec62.sh build, then rec62.sh grid in the next call); on an H100 the planner's end-to-end check
# (call7.sh) and the forward tile-order sections (sections.sh, library carried).
# FLASHATTN_COMMIT=<main head> on the command line (for rec62.sh).
S=bench/results/cpu-2026-12-07-s61
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    bash $S/rec62.sh build
else
    M=$FLASHATTN_COMMIT; unset FLASHATTN_COMMIT
    ( OUT=$OUT/c7; mkdir -p $OUT; bash $S/call7.sh )
    ( OUT=$OUT/sec; mkdir -p $OUT; DEADLINE=470 bash $S/sections.sh )
fi
