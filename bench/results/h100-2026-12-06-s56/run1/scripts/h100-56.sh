#!/bin/bash
# Session 56 on an H100: x4 (probe55b.sh, ~2 min) then the d128 probes (probe-d128.sh, ~4 min).
DEADLINE=200 bash .after-s55/probe55b.sh
DEADLINE=330 bash .after-s55/probe-d128.sh
