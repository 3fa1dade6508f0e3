# Session 54, run 1 (H100; the device call named nvidia-h200 and got an H100, so first54.sh ran its
# H100 branch): from the repository root with the gitignored .after-s53/ carried (m.so.xz: main's library
# of 6a8ccff, every head dim; vd.so.xz: branch bwd-vd-epilogue-stmatrix at 99f88c2):
#   bash .after-s53/first54.sh
# = scripts/next-vd.sh (t/: the 192 / 128 backward tests and memcheck with vd; x/: features value_dim rows,
#   m as ours, vd as --lib; y/: vd as ours, m as --lib; --alternate 3), then scripts/aa-blocked.sh
#   (M1, B1, M2, B2: A/A, m as ours, a copy of m as --lib a, d128 at 16k, --alternate 3 --rounds 40;
#   M = the mirrored de Bruijn order (.after-s53/bench_common_mirrored.py, not kept here: it is
#   `git show bece7f8:bench/bench_common.py`, main before blocked_order), B = blocked_order). B2's chart timed out (the call's deadline); its CSV is whole.
