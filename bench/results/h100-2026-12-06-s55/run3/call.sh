# Session 55, run 3 (H100; the call named nvidia-h200): from the repository root with the gitignored
# .after-s54/ carried (m.so.xz: main's library at 407d363, every head dim; x1 / x2 / x3.so.xz: main
# built with head dim 192 only (FLASHATTN_HEADDIMS=192, archs 90) and one change each, scripts/x1.patch,
# x2.patch, x3.patch):
#   bash .after-s54/probe55.sh   (scripts/probe55.sh)
# x/: the features bench's value_dim rows, m as ours, x1 (Q and dO loaded into the first two stages
# only: no Q/dO traffic after, wrong gradients), x2 (the dQ hand-off's bulk reductions never issued,
# wrong dQ), x3 (main launched in clusters of two CTAs, nothing shared) as --lib, --alternate 3 in
# blocked_order; the check of the --lib entries' gradients removed from the device's copy of the bench
# (sed, in the script). m/: Nsight Compute metrics (L2 sectors by operation, shared-memory wavefronts,
# instructions, DRAM bytes) of ours and cuDNN's backward at 192 / 128 causal 8k, d256 causal 4k, d128
# causal 4k.
