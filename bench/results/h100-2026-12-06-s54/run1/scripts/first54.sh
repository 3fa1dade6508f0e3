#!/bin/bash
# Session 54 first call: on an H200 the forward + features records (rec1); otherwise the vd branch's run,
# then the timing-order A/A (aa-blocked.sh).
nvidia-smi --query-gpu=name --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then exec bash .after-s53/rec1.sh; fi
DEADLINE=250 bash .after-s53/next-vd.sh
mkdir -p $OUT/vd && mv $OUT/all.tgz $OUT/vd/ 2>/dev/null
DEADLINE=200 bash .after-s53/aa-blocked.sh
