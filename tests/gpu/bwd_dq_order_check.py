"""Host-side model of deterministic mode's ordered dQ in the Hopper backward (bwd_sm90_common.cuh:
Sm90BwdWork's grid order, sm90_bwd_producer's add_dq / release_dq; bwd_policies.cuh: q_block_range,
dq_key_blocks).

Each CTA owns one key block n of one (sequence, head) pair and adds its dQ to the query blocks m of
q_block_range(n), in increasing m. On the GQA group walk (d128, d256) a pair is a (sequence, KV head) and
the CTA does that for each of the group's query heads in turn, each head's blocks with their own
counters (modelled with `group` > 1). At d128 (and 192 / 128) two producer warps take the blocks by
turns (block u: warp u % 2), each adding all of its block's rows (bulk tensor reductions);
before that it waits until block m's counter shows the number of key blocks that meet m and come
before n in the fixed order (dq_key_blocks(m): from the first up, or from the last down with a
right window edge), and after the reductions' writes have landed (not only their reads of the
shared buffer) it adds 1 to the counter, at once (the warps load nothing: the producer's roles
split in the ordered instance, Sm90BwdProducerRoles). The consumers hand dQ over through one buffer
(dq_full[u % 2] / dq_empty: a block's dQ is written only once its warp has read the previous one). At d256
(bwd_kernel_sm90_pds.cuh) the consumers stage dQ in the block's Q/dO stage and one dQ thread takes
every block in the same way, adding two per block (one per consumer: modelled as one); the stage is
refilled once its reductions have landed (modelled as the buffer's release after the reads, which
frees sooner).

CTAs are launched in blockIdx.x order onto a random number of slots (the hardware's order, which
the kernel's deadlock freedom assumes), a new one when one finishes; everything else is a random
interleaving, the reductions' writes land after a random delay. Checks, over random problems
(varlen lengths with empty sequences, seqused_k, causal, local, one-sided windows, ragged ends,
block sizes scaled down): no deadlock; dq_key_blocks(m) is exactly the key blocks whose range holds
m; every half of every dQ block receives the additions of exactly those key blocks, landed in the
fixed order; every counter ends at their number.

Broken variants (`broken=`) that must fail on some of the problems:
  "release_on_read"      the arrival after the reductions' reads only (writes may still be in flight)
  "no_wait"              the reductions issued without waiting for the turn
  "count_every_block"    the turn counts every earlier key block, also those that never add to m
  "order_against_grid"   the wait order ascending while the grid runs the key blocks descending
                         (and the other way round): a CTA waits for one launched after it
  "two_per_key_block"    the turn awaits two arrivals per earlier key block where one comes
  "keys_fastest_grid"    the default grid (a pair's key blocks neighbours, ascending) with the
                         descending order of a right window edge
  "walk_first_head_counters"  on the walk, every head's turn read from the first head's counters
Run: python3 tests/gpu/bwd_dq_order_check.py
"""
import random

BM, BN = 4, 8  # query rows per block, keys per key block (the kernel's 64 and 128, scaled down; d256: 4, 4)


def keys_for_row(i, q_len, k_len, left, right):
    diag = i + k_len - q_len
    begin, end = 0, k_len
    if left >= 0 and diag - left > begin: begin = diag - left
    if right >= 0 and diag + right + 1 < end: end = diag + right + 1
    return begin, end


def q_block_range(q_len, k_len, left, right, n0):
    """bwd_policies.cuh's q_block_range: [m_begin, m_end) of the query blocks key block n0 meets."""
    if q_len <= 0 or n0 >= k_len: return 0, 0
    off = k_len - q_len
    n_last = min(n0 + BN, k_len) - 1
    lo, hi = 0, q_len - 1
    if right >= 0: lo = max(lo, n0 - off - right)
    if left >= 0: hi = min(hi, n_last - off + left)
    if lo > hi: return 0, 0
    return lo // BM, hi // BM + 1


def dq_key_blocks(q_len, k_len, left, right, m):
    """bwd_policies.cuh's dq_key_blocks: [n_begin, n_end) of the key blocks that add to block m."""
    first = m * BM
    if k_len <= 0 or first >= q_len: return 0, 0
    last = min(first + BM, q_len) - 1
    off = k_len - q_len
    lo, hi = 0, (k_len + BN - 1) // BN
    if left >= 0:
        x = first + off - left
        if x >= k_len: return 0, 0
        lo = x // BN if x >= 0 else 0
    if right >= 0:
        y = last + off + right
        if y < 0: return 0, 0
        hi = min(hi, y // BN + 1)
    return (lo, hi) if hi > lo else (0, 0)


def work_item(block, pairs, key_blocks, section, descending):
    """Sm90BwdWork's ordered-dQ grid, as the kernel computes it: blockIdx.x -> (pair, key block)."""
    sec = block // (section * key_blocks)
    in_section = block - sec * (section * key_blocks)
    first = sec * section
    here = min(section, pairs - first)  # pairs in this section (the last holds the rest)
    rank = in_section // here
    return first + (in_section - rank * here), (key_blocks - 1 - rank if descending else rank)


def grid(pairs, key_blocks, section, descending, broken=None):
    if broken == "keys_fastest_grid":  # the default grid: a pair's key blocks neighbours, ascending
        return [(p, n) for p in range(pairs) for n in range(key_blocks)]
    return [work_item(b, pairs, key_blocks, section, descending) for b in range(pairs * key_blocks)]


def random_problem(rnd):
    pairs = rnd.randint(1, 4)
    seqs = []
    for _ in range(pairs):  # (q_len, k_len: seqused_k, k_stored: the rows of k/v)
        q_len = rnd.choice([0, 1, 3, 4, 5, 9, 16, 17, 23, 30])
        k_stored = rnd.choice([0, 1, 7, 8, 9, 16, 23, 31, 40])
        k_len = rnd.choice([k_stored, k_stored, rnd.randint(0, k_stored)])
        seqs.append((q_len, k_len, k_stored))
    left, right = rnd.choice([(-1, -1), (-1, 0), (-1, 0), (rnd.randint(0, 12), rnd.randint(0, 12)),
                              (rnd.randint(0, 12), -1), (-1, rnd.randint(0, 6)), (0, 0)])
    return seqs, left, right


def run(seed, broken=None, warps=2, walk=False):
    """warps: the producer's dQ warps that take the blocks by turns, each adding all of its block's
    rows with one arrival (2: d128 and 192 / 128; 1: d256's one dQ thread). walk: the group walk, 1
    to 3 query heads per pair."""
    rnd = random.Random(seed)
    seqs, left, right = random_problem(rnd)
    group = rnd.randint(1, 3) if walk else 1
    pairs = len(seqs)
    key_blocks = max(1, max((k_stored + BN - 1) // BN for _, _, k_stored in seqs))
    descending = right >= 0
    section = rnd.randint(1, pairs)
    slots = rnd.randint(1, 5)
    wait_descending = (not descending) if broken == "order_against_grid" else descending
    if broken == "keys_fastest_grid":
        descending = wait_descending = True
    order = grid(pairs, key_blocks, section, descending, broken)
    assert sorted(order) == [(p, n) for p in range(pairs) for n in range(key_blocks)], "grid covers every CTA once"

    # dq_key_blocks is the inverse of q_block_range, and the fixed order of every block's additions.
    expected = {}  # (pair, head, m) -> key blocks in the fixed order
    for p, (q_len, k_len, k_stored) in enumerate(seqs):
        for m in range((q_len + BM - 1) // BM):
            nb, ne = dq_key_blocks(q_len, k_len, left, right, m)
            meeting = [n for n in range(key_blocks) if n * BN < k_stored
                      and q_block_range(q_len, k_len, left, right, n * BN)[0] <= m
                      < q_block_range(q_len, k_len, left, right, n * BN)[1]]
            assert meeting == list(range(nb, ne)), (seqs[p], left, right, m, meeting, (nb, ne))
            for g in range(group):
                expected[(p, g, m)] = meeting[::-1] if descending else meeting

    counter = {}  # (pair, head, m)
    changed = [0]  # bumped by every change of state: a run without one for long is a deadlock
    added = {}  # (pair, head, m) -> key blocks in landing order
    pending = []  # reductions in flight: [delay, (pair, head, m), n, landed-flag holder]

    def cta(p, n):
        q_len, k_len, k_stored = seqs[p]
        if n * BN >= k_stored: return []  # the whole CTA returns early
        mb, me = q_block_range(q_len, k_len, left, right, n * BN)
        if mb >= me: return []
        blocks = [(g, m) for g in range(group) for m in range(mb, me)]  # the uses, head by head
        full = [False] * len(blocks)        # dq_full of each use
        read = [False] * len(blocks)  # dq_empty: the use's warp has read its buffer

        def consumers():
            for u in range(len(blocks)):
                for _ in range(rnd.randint(1, 6)): yield  # the products of block u
                if u > 0:
                    while not read[u - 1]: yield  # dq_empty
                full[u] = True
                changed[0] += 1

        def turn_of(m):
            nb, ne = dq_key_blocks(q_len, k_len, left, right, m)
            if broken == "count_every_block":
                nb, ne = 0, (k_len + BN - 1) // BN
            per_key_block = 2 if broken == "two_per_key_block" else 1
            return per_key_block * ((ne - 1 - n) if wait_descending else (n - nb))

        def release(g, m, flight):
            if broken != "release_on_read":
                while flight and not flight[0][3][0]: yield  # bulk_wait_group 0: the writes landed
            counter[(p, g, m)] = counter.get((p, g, m), 0) + 1
            changed[0] += 1

        def warp(w):
            for u in range(w, len(blocks), warps):
                g, m = blocks[u]
                turn = turn_of(m)
                while not full[u]: yield  # dq_full[u % 2]
                if broken != "no_wait":
                    head = 0 if broken == "walk_first_head_counters" else g
                    while counter.get((p, head, m), 0) < turn: yield
                landing = rnd.choice([rnd.randint(1, 10), rnd.randint(10, 120)])  # some land late
                op = [landing, (p, g, m), n, [False]]
                pending.append(op)
                for _ in range(rnd.randint(0, 2)): yield  # bulk_wait_group_read
                read[u] = True
                changed[0] += 1
                yield from release(g, m, [op])

        return [consumers()] + [warp(w) for w in range(warps)]

    live = {}  # resident CTA -> its live actors
    next_cta = 0
    last_change, seen_change = 0, -1
    for step in range(1000000):
        if changed[0] != seen_change: seen_change, last_change = changed[0], step
        if step - last_change > 3000: break  # every resident actor waits, nothing in flight
        for op in list(pending):
            op[0] -= 1
            if op[0] <= 0:
                added.setdefault(op[1], []).append(op[2])
                op[3][0] = True
                pending.remove(op)
                changed[0] += 1
        for c in [c for c, actors in live.items() if not actors]: del live[c]
        while len(live) < slots and next_cta < len(order):  # launched in blockIdx.x order
            live[next_cta] = cta(*order[next_cta])
            next_cta += 1
            changed[0] += 1
        if not live and not pending and next_cta == len(order): break
        actors = [(c, a) for c, acts in live.items() for a in acts]
        if actors:
            c, a = rnd.choice(actors)
            try: next(a)
            except StopIteration:
                live[c].remove(a)
                changed[0] += 1
    if live or pending or next_cta < len(order):
        raise AssertionError(f"deadlock: seed {seed}, seqs {seqs}, window ({left}, {right}), section {section}, "
                             f"slots {slots}, {len(live)} resident, {len(order) - next_cta} not launched")
    for (p, g, m), keys in expected.items():
        got = added.get((p, g, m), [])
        assert got == keys, (seed, seqs[p], (left, right), g, m, got, keys)
        assert counter.get((p, g, m), 0) == len(keys), (seed, p, g, m, counter.get((p, g, m)), keys)
    return len(order)


def caught(broken, seeds=600, warps=2, walk=False):
    hits = 0
    for seed in range(seeds):
        try:
            run(seed, broken, warps, walk)
        except AssertionError:
            hits += 1
    return hits


if __name__ == "__main__":
    for warps, BN, walk, schedule in ((2, 8, False, "d128 and 192 / 128: two producer warps by turns"),
                                      (2, 8, True, "d128 on the GQA group walk: 1-3 query heads per CTA, in turn"),
                                      (1, 4, False, "d256 (key blocks as tall as query blocks): one dQ thread"),
                                      (1, 4, True, "d256 on the GQA group walk")):
        ctas = sum(run(seed, warps=warps, walk=walk) for seed in range(1500))
        print(f"ordered dQ, {schedule}: 1500 random problems ({ctas} CTAs), no deadlock, every dQ block's "
              "additions complete and in the fixed order, dq_key_blocks the inverse of q_block_range")
        for broken in ("release_on_read", "no_wait", "count_every_block", "order_against_grid", "two_per_key_block",
                       "keys_fastest_grid", "walk_first_head_counters"):
            if broken == "walk_first_head_counters" and not walk:
                continue
            hits = caught(broken, 300, warps, walk)
            assert hits > 0, f"broken={broken}: not caught by any problem"
            print(f"  broken variant {broken}: caught on {hits} of 300 problems")
