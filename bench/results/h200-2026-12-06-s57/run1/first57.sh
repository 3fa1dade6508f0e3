#!/bin/bash
# Session 57 first call: probe56a (k128 / k96 against main, ~6 minutes) on whatever card comes.
DEADLINE=${DEADLINE:-370} bash .after-s56/probe56a.sh
