"""A list-scheduling model of the Hopper backward's grid under a causal mask: how far above the
ideal makespan each launch order ends (132 SMs; a CTA's time is the query blocks its key block
meets plus one for its fixed cost; CTAs start in launch order as SMs free up). Orders: pair by pair
(each pair's key blocks first to last), fully key-major, 40 MB sections key-major, pair by pair
with the last pairs (about W waves of CTAs) key-major, and the planner's rule (about four waves, at
most a section, at least two pairs; the section in pairs as the shape gives it). Plain Python: python3 bench/grid_order_model.py
"""
import heapq


def makespan(durations, sms=132):
    free = [0.0] * sms
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def with_tail(lengths, pairs, tail):
    """Pair by pair (each pair's key blocks in order), then the last `tail` pairs key-major."""
    key_blocks = len(lengths)
    return ([lengths[n] for _ in range(pairs - tail) for n in range(key_blocks)] +
            [lengths[n] for n in range(key_blocks) for _ in range(tail)])


def cta_length(n, seqlen, block_n, block_m):
    return (seqlen + block_m - 1) // block_m - (n * block_n) // block_m + 1.0


SHAPES = [("d128 1k", 1024, 256, 128, 64, 40), ("d128 2k", 2048, 128, 128, 64, 20), ("d128 4k", 4096, 64, 128, 64, 10),
          ("d128 16k", 16384, 16, 128, 64, 2), ("192/128 4k", 4096, 64, 96, 64, 6), ("192/128 8k", 8192, 32, 96, 64, 3),
          ("192/128 16k", 16384, 16, 96, 64, 1), ("d256 1k", 1024, 128, 64, 64, 20), ("d256 4k", 4096, 32, 64, 64, 5)]

if __name__ == "__main__":
    for name, seqlen, pairs, block_n, block_m, section in SHAPES:
        key_blocks = (seqlen + block_n - 1) // block_n
        lengths = [cta_length(n, seqlen, block_n, block_m) for n in range(key_blocks)]
        ideal = sum(lengths) * pairs / 132
        orders = {"pairs": [lengths[n] for _ in range(pairs) for n in range(key_blocks)],
                  "key-major": [lengths[n] for n in range(key_blocks) for _ in range(pairs)],
                  "sections": [lengths[n] for s0 in range(0, pairs, section) for n in range(key_blocks)
                               for _ in range(min(section, pairs - s0))]}
        for waves in (2, 4):
            tail = min(pairs, max(1, round(waves * 132 / key_blocks)))
            orders[f"tail {waves} waves ({tail} pairs)"] = with_tail(lengths, pairs, tail)
        # The planner's rule (plan_backward): about four waves, at most a section, at least two pairs.
        tail = min(-(-4 * 132 // key_blocks), max(section, 2), pairs)
        tail = tail if tail >= 2 else 0
        orders[f"planner ({tail} pairs)"] = with_tail(lengths, pairs, tail)
        print(f"{name:12s} " + "  ".join(f"{k} {makespan(v) / ideal:.3f}" for k, v in orders.items()))
