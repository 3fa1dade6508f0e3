#!/bin/bash
# Session 56 first call: on an H200 the forward + features records (rec1), else h100-56.sh (x4, the d128 probes).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then bash .after-s55/rec1.sh; else bash .after-s55/h100-56.sh; fi
