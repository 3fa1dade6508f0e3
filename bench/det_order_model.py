"""A model of deterministic mode's ordered-dQ grid under a causal mask (Hopper backward): why the key
blocks add from the last down and the grid runs the shortest CTAs first.

A CTA is one (pair, key block n): one unit of fixed cost, then one unit per query block it meets
([first_m(n), M) under a causal mask). Query block m's dQ takes the adds of the key blocks that meet it
in a fixed order; a CTA's add of m waits for its predecessor's add of m plus `eps` (the turn's hand-off:
the predecessor's reductions landing, its counter, the poll), and with two dQ buffers its block i starts
only once its add of block i - 2 is done. 132 SMs take CTAs in launch order (sections of W pairs, the
pairs fastest). Printed: makespan over the ideal (work / 132) for
  main:     order from the last key block down, the grid shortest-first, each CTA walking its query
            blocks from its first (a successor reaches a block one step behind its predecessor)
  reversed: order from the first key block up, the grid longest-first, each CTA walking its query
            blocks from the last down (a successor reaches a block with its predecessor)
The reversed form wins only while eps is a small fraction of a block's time; measured (H100, session
49: docs/perf-log.md) it lost 2-30% at 1k-4k, losses the model gives for eps between half a block and a
whole one. Main's order keeps the hand-off off the critical path because each successor runs a block behind.
Plain Python: python3 bench/det_order_model.py [eps ...]
"""
import heapq
import sys

from grid_order_model import cta_length

SHAPES = [("d256 8/8 1k", 1024, 128, 64, 64, 11), ("d256 8/8 4k", 4096, 32, 64, 64, 2),
          ("d128 16/16 1k", 1024, 256, 128, 80, 22), ("d128 16/16 2k", 2048, 128, 128, 80, 11)]


def makespan(P, K, M, first_m, launch, walk_reverse, order_desc, eps, stages=2, sms=132):
    pred = {}
    for m in range(M):
        seq = sorted((n for n in range(K) if first_m[n] <= m), reverse=order_desc)
        for i, n in enumerate(seq):
            pred[(n, m)] = seq[i - 1] if i else None
    add_time = {}
    free = [0.0] * sms
    end_all = 0.0
    for p, n in launch:  # every predecessor is launched earlier in both orders
        t = heapq.heappop(free) + 1.0
        ms = range(M - 1, first_m[n] - 1, -1) if walk_reverse else range(first_m[n], M)
        adds = []
        for i, m in enumerate(ms):
            if i >= stages:
                t = max(t, adds[i - stages])
            t += 1.0
            a = t
            if pred[(n, m)] is not None:
                a = max(a, add_time[(p, pred[(n, m)], m)] + eps)
            if adds:
                a = max(a, adds[-1] + eps)
            add_time[(p, n, m)] = a
            adds.append(a)
        end = max([t] + adds)
        heapq.heappush(free, end)
        end_all = max(end_all, end)
    return end_all


def main():
    for eps in [float(e) for e in sys.argv[1:]] or [0.05, 0.5, 1.0]:
        for name, seqlen, P, bn, bm, W in SHAPES:
            K, M = seqlen // bn, -(-seqlen // bm)
            first_m = [(n * bn) // bm for n in range(K)]
            ideal = sum(cta_length(n, seqlen, bn, bm) for n in range(K)) * P / 132
            out = []
            for label, ascending, reverse in (("main", False, False), ("reversed", True, True)):
                launch = [(p, n) for s0 in range(0, P, W) for n in (range(K) if ascending else range(K - 1, -1, -1))
                          for p in range(s0, min(P, s0 + W))]
                out.append(f"{label} {makespan(P, K, M, first_m, launch, reverse, not ascending, eps) / ideal:.3f}")
            print(f"eps {eps:4.2f} {name:14s} " + "  ".join(out))


if __name__ == "__main__":
    main()
