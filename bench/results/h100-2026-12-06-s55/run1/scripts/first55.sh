#!/bin/bash
# Session 55 first call: on an H200 the forward+features records, else the qtma recheck.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then bash .after-s54/rec1.sh; else bash .after-s54/qtma.sh; fi
