#!/bin/bash
# Session 58 first call: bench/results/cpu-2026-12-06-s57/first58.sh (kept there, run from .after-s57), as it ran.
DEADLINE=540 bash .after-s57/first58.sh 2>&1 | tail -45
