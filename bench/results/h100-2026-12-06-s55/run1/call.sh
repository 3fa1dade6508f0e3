# Session 55, run 1 (H100; the call named nvidia-h200 was refused, the next named nvidia-h100-x1):
# from the repository root with the gitignored .after-s54/ carried (m128.so.xz: main at 407d363, d128
# only; nq128.so.xz: the same with kv_tensor_maps.cuh's kQTmaMinKeys = 1 << 30, Q by cp.async at every
# length):
#   bash .after-s54/first55.sh
# = scripts/qtma.sh on an H100: t/ the forward tests with nq (-k 128; the 6 failures are head dims 192
# and 256 that a d128-only build does not have), f/ d128 forward at 4k/8k/16k, m as ours, nq as --lib,
# --alternate 3 --rounds 40 in blocked_order.
