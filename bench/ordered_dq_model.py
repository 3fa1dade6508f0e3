"""A timing model of deterministic mode's ordered dQ against the default backward on the Hopper
kernel (docs/perf-log.md, "ordered dQ"): no GPU, a prediction to compare the H200's numbers with.

The model: 132 SMs, one CTA each; CTAs start in blockIdx.x order on the first SM that is free. A
CTA (one key block) runs the query blocks of its range; per block the consumers compute for t_b
(the block's five products), then hand dQ to the producer through one buffer: they write block
u's dQ only once the producer has read block u-1's. The producer adds block u's dQ once it is handed
over and, in ordered mode, once block m's counter shows the arrivals of the key blocks before it
(seen `poll` after they arrive); reading the buffer takes `read`, the arrival follows once the
writes land (`write` after the add starts). The CTA ends `epilogue` after its last block (K/V
loads and the dK/dV epilogue together). Default mode: the same without the counters, and the
default grid (a pair's key blocks neighbours). Ordered: Sm90BwdWork's grid (sections of pairs whose
Q, dO and dQ take 40 MB, pairs fastest; key blocks from the last down under a right window edge).
Masked blocks cost the same as the others here, and memory traffic is not modelled (the sections
keep the default grid's L2 reuse by design; that is what the H200 must confirm).

    python3 bench/ordered_dq_model.py [--poll US] [--write US]
"""
import argparse
import heapq

SMS = 132


def ranges(seqlen, causal, bm=64, bn=128):
    """q_block_range per key block for a square causal or unmasked problem."""
    n_blocks, m_blocks = (seqlen + bn - 1) // bn, (seqlen + bm - 1) // bm
    out = []
    for n in range(n_blocks):
        first = (n * bn) // bm if causal else 0
        out.append((first, m_blocks))
    return out


def simulate(pairs, seqlen, hdim, causal, ordered, t_b, poll, read, write, epilogue):
    rng = ranges(seqlen, causal, bn=64 if hdim == 256 else 128)
    n_blocks = len(rng)
    if ordered:
        section = max(1, min(pairs, int(40 * 2**20 // (seqlen * hdim * 8))))
        order = []
        for first in range(0, pairs, section):
            here = min(section, pairs - first)
            for rank in range(n_blocks):
                for p in range(first, first + here):
                    order.append((p, n_blocks - 1 - rank if causal else rank))
    else:
        order = [(p, n) for p in range(pairs) for n in range(n_blocks)]
    free = [0.0] * SMS
    heapq.heapify(free)
    arrived = {}  # (pair, m) -> time the last arrival is visible
    end = 0.0
    for p, n in order:
        start = heapq.heappop(free)
        mb, me = rng[n]
        written = start + 1.0  # K/V and the first stage land
        computed = written + t_b
        last_empty, t = start, start
        for m in range(mb, me):
            handed = max(computed, last_empty)  # dQ(u) written once dq_empty(u-1)
            add = handed
            if ordered:
                add = max(add, arrived.get((p, m), 0.0))
            last_empty = add + read
            if ordered:
                arrived[(p, m)] = add + write + poll
            computed = handed + t_b
            t = add + write
        finish = max(t, computed - t_b) + epilogue
        end = max(end, finish)
        heapq.heappush(free, finish)
    return end


SHAPES = [  # (hdim, heads): MHA 2048 / d heads; GQA's query heads (the scratch: the same CTAs)
    (64, 32), (128, 16), (128, 32), (128, 64), (256, 8), (256, 32)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poll", type=float, default=1.0, help="us from an arrival to a waiter seeing it")
    ap.add_argument("--write", type=float, default=1.0, help="us from an add's start to its writes landed")
    args = ap.parse_args()
    print(f"poll {args.poll} us, write {args.write} us; ordered / default time, per seqlen 1k 2k 4k 8k 16k")
    for hdim, heads in SHAPES:
        # t_b: a block pair's 10 * 64 * keys * d FLOPs (keys: 128, at d256 64) at ~540 TFLOP/s / 132 SMs.
        t_b = 10 * 64 * (64 if hdim == 256 else 128) * hdim / (540e12 / SMS) * 1e6
        for causal in (False, True):
            ratios = []
            for seqlen in (1024, 2048, 4096, 8192, 16384):
                pairs = 16384 // seqlen * heads
                kw = dict(t_b=t_b, poll=args.poll, read=0.3, write=args.write, epilogue=3.0)
                base = simulate(pairs, seqlen, hdim, causal, False, **kw)
                ours = simulate(pairs, seqlen, hdim, causal, True, **kw)
                ratios.append(base / ours)
            print(f"d{hdim:<3} {heads:2d} heads {'causal' if causal else 'full  '}: "
                  + " ".join(f"{r:5.3f}" for r in ratios))


if __name__ == "__main__":
    main()
