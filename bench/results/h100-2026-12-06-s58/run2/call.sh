#!/bin/bash
# Session 58 second call: bench/results/cpu-2026-12-06-s57/second58.sh (kept there, run from .after-s57), as it ran.
DEADLINE=300 DET_TIMEOUT=120 bash .after-s57/second58.sh 2>&1 | tail -30
