"""Host-side model of the synchronisation of src/cuda/kernels/bwd_kernel_sm90.cuh.

The producer and the two consumer warpgroups are generators; mbarriers complete phases (waits are
by parity, as mbarrier.try_wait.parity), the named barrier gathers both consumers. Copies land
after a random delay, the three run in random interleavings. The walk is the kernel's: a chunk's
key blocks, each with a range of query blocks (empty ranges skip every barrier), K/V in one stage
(kv_full / kv_empty), Q/dO/lse/dsum in a ring of S stages (q_full / q_empty), dS in two buffers
handed over by the named barrier, dQ in one buffer handed to the producer (dq_full[u % 2] /
dq_empty) while dK still reads the stage (released after dK's wait); the producer adds block u-1's
dQ after loading block u's stage, and the last one after its loop. Checks, for
random walks, S = 2 and 3: no deadlock; every product reads the K/V block and the query block it
expects; the dQ product of each consumer reads a dS buffer that holds both consumers' dS of its own
query block (double buffering is enough); the producer adds every block's dQ exactly once, from a
buffer that holds both consumers' halves of that block and is not overwritten while it reads.

run_pds (without the hand-off) models the d256 schedule up to session 64 (64-key blocks, dQ staged
in the Q/dO stage; run_pds_do1 models today's), kept for its checks of the dQ thread's rules that
run_pds_do1 leaves out (the wait between key blocks, the ordered dQ): the same producer and rings
without the dQ hand-off; each consumer writes its key half of P and dS of a query block into buffer
u % 2, one named barrier, then its dQ, dV, dK wgmmas read both halves, K and its own halves of
the stage until their wait; then it stages its dQ over those halves of the stage and arrives on
dq_staged[stage] and q_empty. The producer's dQ thread (split roles) waits for dq_staged, issues
the block's bulk reductions, which read the stage and later complete, and releases the stage (a
third q_empty arrival) once they have read it; where the CTA walks several key blocks (and so
adds to the same rows again) it waits, before a key block's first reductions, for the last key
block's to complete. Checks: no deadlock; every product reads the blocks it expects, and none
reads staged dQ; no reduction before both consumers staged the block; no stage refilled while a
reduction reads it; no reduction issued while an earlier one to the same rows runs; P/dS buffers
hold both consumers' halves of the reader's block while read; every block staged by both
consumers and reduced once, in walk order.

Both schedules end with the dK/dV epilogue of the CTA's last key block (sm90_bwd_store_dkdv): a
named barrier (every consumer's wgmmas on K and V complete), each consumer's dK/dV halves into K's
and V's buffers, a second barrier, then 16-byte stores reading both halves. Checks: no product
reads K or V after the staging began, and the stores read both halves.

run_pds(handoff=True) models the same schedule at 192 / 128, where the dQ hand-off buffer fits: each
consumer, right after its dQ wait (while dV / dK still read the stage and P / dS), waits until the
producer has read the previous block's dQ (dq_empty), writes its half and arrives on dq_full; the
producer adds block u-1's after loading block u, as in run. Checks as run's for dQ, and run_pds's
for the rest.

run_pds(ordered=True) adds deterministic mode's ordered dQ at d256 (one key block per CTA): the dQ
thread waits for each block's turn (a random wait for the counter) before issuing its reductions
and counts the block once they have completed, then releases the stage. Checks as run_pds's, and
every block counted once, in order, none before its reductions completed.
run(split=True) and run_pds(ordered=True, handoff=True) model the split at d128 and 192 / 128: two
dQ warps take the blocks' hand-offs by turns (block u: warp u % 2, on dq_full[u % 2]), each after a
random wait for the counter, and after its read a random while (the writes landing, the fence, the
count) before its next block, while the loader runs on. (The order between CTAs, and the counters:
tests/gpu/bwd_dq_order_check.py.)

run_pds_do1 models the d256 schedule (bwd_kernel_sm90_pds.cuh with staged dQ): 80-key blocks, one
dO stage (do_full / do_empty) beside the Q ring, dO released once each consumer's dV completed, and
each consumer's dQ in two products, the first staged in a region of its own that reaches into the
P buffer (after a barrier behind every consumer's dV), the second over its half of the Q stage
once its dK completed; the dQ thread reduces each half once both consumers staged it and releases
the region (extra_read, which the consumers wait for before the next P) and the Q stage (q_empty)
once read; dS is rewritten after a consumer barrier. Checks: no deadlock; every product reads the
blocks it expects (dO included); no stage, dO, region, P or dS rewritten under a reader; every
block reduced once, after both consumers staged it, in walk order. (Its p_read barrier also orders the dK/dV epilogue
behind every product on K and V, so "no_epilogue_barrier" cannot show there.)

Broken variants (`broken=`) that the checks must catch, each on some of the random walks:
  run:     "single_ds" (one dS buffer), "no_dq_empty_wait" (dQ written before the producer read
           the previous block's), "release_before_dk" (the stage released before dK's wait)
  run_pds: "single_pds" (one P/dS buffer), "no_pds_barrier" (dQ/dV/dK issued without the named
           barrier), "early_q_release" (the stage released before the dV/dK wait)
  run_pds(handoff=True), run(split=True), run_pds(ordered=True, handoff=True): "no_dq_empty_wait"
  run(split=True), run_pds(ordered=True, handoff=True): "one_dq_full" (both warps on one dq_full,
           by the parity of their block)
  run_pds: "stage_before_wait" (dQ staged before the dV / dK reads end), "release_before_read"
           (the stage released as the reductions are issued), "retire_after_read" (with several
           key blocks, or ordered: the reductions' read waited for, not their completion),
           "no_staged_wait" (reduced without waiting for both consumers' staging)
  both:    "no_epilogue_barrier" (the staging without the first barrier), "stage_every_block"
           (staging after every key block, while the producer refills K and V)
  run_pds_do1: "no_do_empty_wait" (dO refilled before both dVs completed), "early_do_release" (dO
           released as dV starts), "no_extra_wait" (the region or P written before the reductions
           read it), "no_p_read_barrier" (dQ staged over P while the other consumer's dV reads it),
           "stage_before_dk" (the second half over the Q stage while dK reads it), "no_region_wait"
           (the region reduced before both consumers staged it), "no_pds_free_barrier" (dS written
           while the other consumer's dK reads it), "stage_every_block"
Run: python3 tests/gpu/bwd_sm90_protocol_check.py
"""
import random


class MBar:
    def __init__(self, count): self.count, self.pending, self.phase = count, count, 0

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0: self.phase += 1; self.pending = self.count

    def done(self, parity):  # try_wait.parity: the phase with this parity has completed
        return (self.phase & 1) != parity


class NBar:  # named barrier: completes when `count` arrivals gathered
    def __init__(self, count): self.count, self.arrived, self.gen = count, 0, 0

    def arrive(self):
        self.arrived += 1
        if self.arrived == self.count: self.arrived = 0; self.gen += 1


def dq_full_of(dq_full, use, broken):
    """The hand-off's dq_full barrier of block `use` and the parity its phase completes with:
    dq_full[use % 2], phase use // 2 ("one_dq_full": both warps on dq_full[0], by their block's
    parity)."""
    if broken == "one_dq_full": return dq_full[0], use & 1
    return dq_full[use % 2], (use // 2) & 1


def staged_epilogue(c, rnd, bar, kv_stage, staged, broken):
    """Consumer c's dK/dV epilogue through K's and V's buffers (the CTA's last key block)."""
    if broken != "no_epilogue_barrier":
        g = bar.gen; bar.arrive()
        while bar.gen == g: yield
    kv_stage[0] = "epilogue"; staged[c] = True  # its registers' pairs into the K and V tiles
    yield
    g = bar.gen; bar.arrive()
    while bar.gen == g: yield
    for _ in range(rnd.randint(1, 3)):  # the 16-byte stores read both consumers' halves
        assert staged == [True, True] and kv_stage[0] == "epilogue", (c, staged, kv_stage)
        yield


def stages_epilogue(walk, index, broken):
    return index == len(walk) - 1 or broken == "stage_every_block"


def load_walk(walk, S, rnd, pending, kv, q, after_copy=None, at_end=None):
    """The producer's loads along a walk: K/V once per key block with query blocks (kv = (full,
    empty, stage) of its one stage, refilled once both consumers released it), then each query
    block's Q stage (q = (full[S], empty[S], stages)), refilled once its previous use was
    released; after_copy(use) runs after a stage's copy is issued, at_end(uses) after the walk (the
    schedules' dQ hand-off, dO ring)."""
    kv_full, kv_empty, kv_stage = kv
    q_full, q_empty, q_stage = q
    q_uses = kv_uses = 0
    for n, blocks in walk:
        if blocks == 0: continue
        if kv_uses > 0:
            while not kv_empty.done((kv_uses - 1) & 1): yield
        pending.append([rnd.randint(1, 8), kv_stage, 0, n, kv_full])
        kv_uses += 1
        for m in range(blocks):
            s = q_uses % S
            if q_uses >= S:
                while not q_empty[s].done(((q_uses // S) - 1) & 1): yield
            pending.append([rnd.randint(1, 8), q_stage, s, (n, m), q_full[s]])
            if after_copy: yield from after_copy(q_uses, (n, m))
            q_uses += 1
            yield
    if at_end: yield from at_end(q_uses)


def consume_walk(walk, S, c, rnd, broken, kv_full, kv_empty, q_full, kv_stage, epilogue_bar, staged, block):
    """Consumer c's walk: each key block's K/V and each query block's Q stage waited for, block(use,
    s, (n, m)) (a generator: the schedule's products of one query block, use counting them over the
    walk, s its stage), K/V released after the key block, and the dK/dV epilogue after the CTA's
    last one (also after a key block without query blocks)."""
    q_uses = kv_uses = 0
    for index, (n, blocks) in enumerate(walk):
        if blocks == 0:
            if stages_epilogue(walk, index, broken):
                yield from staged_epilogue(c, rnd, epilogue_bar, kv_stage, staged, broken)
            continue
        while not kv_full.done(kv_uses & 1): yield
        for m in range(blocks):
            s = q_uses % S
            while not q_full[s].done((q_uses // S) & 1): yield
            yield from block(q_uses, s, (n, m))
            q_uses += 1
        kv_empty.arrive()
        kv_uses += 1
        if stages_epilogue(walk, index, broken):
            yield from staged_epilogue(c, rnd, epilogue_bar, kv_stage, staged, broken)


def simulate(live, pending, rnd, walk, S, seed, landed=None, tick=None):
    """Random interleavings of the actors (generators) until all end: each turn lands the copies
    whose delay ran out (landed(stage list, slot) after each), runs tick() (asynchronous work such
    as bulk reductions), then one step of a random live actor; 200,000 turns without an end is a
    deadlock."""
    for _ in range(200000):
        for p in list(pending):
            p[0] -= 1
            if p[0] <= 0:
                if p[1] is not None: p[1][p[2]] = p[3]
                if landed: landed(p[1], p[2])
                p[4].arrive(); pending.remove(p)
        if tick: tick()
        if not live and not pending: return
        if live:
            a = rnd.choice(live)
            try: next(a)
            except StopIteration: live.remove(a)
    raise AssertionError(f"deadlock: walk {walk}, S={S}, seed {seed}")


def run(walk, S, seed, broken=None, split=False):
    """walk: [(key block, number of query blocks)], in the kernel's order. split: the ordered dQ's
    producer roles (one key block): a loader (K/V, then the stages) and an adder that takes each
    block's dQ in turn, after a random wait for the block's counter. dQ is issued before dK: its
    hand-off runs while dK still reads the stage, which is released after dK's wait."""
    rnd = random.Random(seed)
    q_full = [MBar(1) for _ in range(S)]; q_empty = [MBar(2) for _ in range(S)]
    kv_full = MBar(1); kv_empty = MBar(2)
    dq_full = [MBar(2), MBar(2)]; dq_empty = MBar(1)
    dq = [None, None]  # [consumer half] -> use index whose dQ is in the buffer
    added = []
    ds_ready = NBar(2); epilogue_bar = NBar(2); staged = [False, False]
    q_stage = [None] * S; kv_stage = [None]
    ds = [[None, None], [None, None]]  # [buffer][consumer] -> query-block index written
    pending = []  # async copies: [delay, stage list, slot, value, barrier]

    def add_dq(use):
        bar, parity = dq_full_of(dq_full, use, broken)
        while not bar.done(parity): yield
        for _ in range(rnd.randint(1, 4)):  # the reads and reductions take a while
            assert dq == [use, use], (use, dq)
            yield
        added.append(use)
        dq_empty.arrive()

    def add_previous(uses, _=None):  # the hand-off: block u-1's dQ after block u's stage, the last at the end
        if uses > 0 and not split: yield from add_dq(uses - 1)

    def producer():
        yield from load_walk(walk, S, rnd, pending, (kv_full, kv_empty, kv_stage), (q_full, q_empty, q_stage),
                             add_previous, add_previous)

    def adder(warp):  # split roles: dQ warp `warp` takes every other block, each after its turn
        for use in range(warp, sum(blocks for _, blocks in walk), 2):
            for _ in range(rnd.randint(0, 12)): yield  # the counter reaches the block's turn
            yield from add_dq(use)
            for _ in range(rnd.randint(0, 12)): yield  # its writes land, the fence, its count

    def block(c, use, s, nm):
        n, m = nm
        assert q_stage[s] == (n, m), (c, n, m, q_stage[s])
        assert kv_stage[0] == n, (c, n, kv_stage)
        for _ in range(rnd.randint(0, 3)): yield  # S, dP, softmax, dV, dK issued
        buf = 0 if broken == "single_ds" else use % 2
        ds[buf][c] = use  # dS^T of this block, this consumer's keys
        g = ds_ready.gen; ds_ready.arrive()
        while ds_ready.gen == g: yield
        # The dQ wgmma reads both halves of the buffer until its wait.
        for _ in range(rnd.randint(1, 4)):
            assert ds[buf] == [use, use], (c, use, ds[buf])
            yield
        def hand_off():
            if use > 0 and broken != "no_dq_empty_wait":
                while not dq_empty.done((use - 1) & 1): yield
            dq[c] = use
            dq_full_of(dq_full, use, broken)[0].arrive()
        # dK reads the stage (Q) and K under the hand-off, until its wait (a random number of steps).
        if broken == "release_before_dk": q_empty[s].arrive()
        reads, handing_off = rnd.randint(0, 6), hand_off()
        while handing_off or reads:
            if reads:
                assert q_stage[s] == (n, m) and kv_stage[0] == n, (c, n, m, q_stage[s])
                reads -= 1
            if handing_off and next(handing_off, StopIteration) is StopIteration:
                handing_off = None
            yield
        if broken != "release_before_dk": q_empty[s].arrive()

    def consumer(c):
        yield from consume_walk(walk, S, c, rnd, broken, kv_full, kv_empty, q_full, kv_stage, epilogue_bar,
                                staged, lambda use, s, nm: block(c, use, s, nm))

    uses = sum(blocks for _, blocks in walk)
    actors = [producer(), consumer(0), consumer(1)] + ([adder(0), adder(1)] if split else [])
    simulate(list(actors), pending, rnd, walk, S, seed)
    assert added == list(range(uses)), (walk, added)


def run_pds(walk, S, seed, broken=None, ordered=False, handoff=False, single_buffer=False):
    """The d256 schedule (bwd_kernel_sm90_pds.cuh); walk and S as run(). Without the hand-off each
    consumer stages its dQ of a block over its halves of the block's stage (after its dV / dK
    reads) and arrives on dq_staged[stage] and q_empty; the producer's dQ thread (split roles: the
    loader runs on) waits for dq_staged, issues the block's bulk reductions, which read the stage
    (random delay) and complete later (another), and arrives on q_empty once they have read it (or,
    where the CTA walks several key blocks and so adds to the same rows again, before issuing the
    next key block's, waits for completion); so q_empty counts three arrivals. ordered:
    deterministic mode's ordered dQ (the walk is then one key block): the dQ thread waits for the
    turn (a random wait for the counter) before issuing, and counts the block once the reductions
    have completed, then releases the stage. With the hand-off (192 / 128) the producer's dQ
    warps take the blocks' dQ by turns, as run's split adders. single_buffer (192 / 128's 96-key
    blocks): one P / dS buffer, written by each consumer only after a named barrier that both reach
    after their products of the block before completed."""
    rnd = random.Random(seed)
    q_full = [MBar(1) for _ in range(S)]; q_empty = [MBar(2 if handoff else 3) for _ in range(S)]
    dq_staged = [MBar(2) for _ in range(S)]
    kv_full = MBar(1); kv_empty = MBar(2)
    pds_ready = NBar(2); pds_free = NBar(2); epilogue_bar = NBar(2); staged = [False, False]
    q_stage = [None] * S; kv_stage = [None]
    halves = [[None, None] for _ in range(S)]  # [stage][consumer] -> use whose dQ is staged there
    buffers = 1 if broken == "single_pds" or single_buffer else 2
    pds = [[None, None] for _ in range(buffers)]  # [buffer][consumer] -> use whose P and dS it holds
    added = [[], []]  # [consumer] -> uses whose dQ half was added (handed off, or its reduction issued)
    pending = []
    dq_full = [MBar(2), MBar(2)]; dq_empty = MBar(1)  # the hand-off
    dq = [None, None]  # [consumer half] -> use whose dQ is in the hand-off buffer
    reduced = []  # uses the producer added from the hand-off buffer
    reductions = []  # staged: [stage, use, (key block, query block), ticks to read, ticks to complete]
    published = []  # ordered, staged: uses counted, in order

    def add_dq(use):
        bar, parity = dq_full_of(dq_full, use, broken)
        while not bar.done(parity): yield
        for _ in range(rnd.randint(1, 4)):
            assert dq == [use, use], (use, dq)
            yield
        reduced.append(use)
        dq_empty.arrive()

    def add_previous(uses, _=None):  # the hand-off, as run's
        if handoff and not ordered and uses > 0: yield from add_dq(uses - 1)

    def producer():
        yield from load_walk(walk, S, rnd, pending, (kv_full, kv_empty, kv_stage), (q_full, q_empty, q_stage),
                             add_previous, add_previous)

    revisits = sum(1 for _, blocks in walk if blocks) > 1

    def staged_adds():  # the dQ thread of the split roles, block by block (walk order)
        use, last_n = 0, None
        for n, blocks in walk:
            for m in range(blocks):
                s = use % S
                if broken != "no_staged_wait":
                    while not dq_staged[s].done((use // S) & 1): yield
                if ordered:
                    for _ in range(rnd.randint(0, 6)): yield  # the counter reaches the block's turn
                whole = (ordered or revisits) and broken != "retire_after_read"
                if revisits and n != last_n and whole:  # the key block before completed
                    while reductions: yield
                last_n = n
                same = [r for r in reductions if r[2][1] == m]
                assert not same, ("a reduction issued while an earlier one to its rows runs", n, m, same)
                assert halves[s] == [use, use], ("reduced before both consumers staged", use, halves[s])
                r = [s, use, (n, m), rnd.randint(1, 6), rnd.choice([rnd.randint(1, 12), rnd.randint(1, 80)])]
                reductions.append(r)
                added_staged.append(use)
                if broken != "release_before_read":
                    while r[3] > 0: yield
                if ordered:
                    while r[4] > 0 and broken != "retire_after_read": yield
                    assert r[4] == 0, ("counted before its reductions completed", use, r)
                    published.append(use)
                q_empty[s].arrive()
                use += 1
                yield

    def dq_warp(warp):  # ordered with the hand-off: the split roles' dQ warps, by turns
        for use in range(warp, sum(blocks for _, blocks in walk), 2):
            for _ in range(rnd.randint(0, 12)): yield  # the counter reaches the block's turn
            yield from add_dq(use)
            for _ in range(rnd.randint(0, 12)): yield  # its writes land, the fence, its count

    def block(c, use, s, nm):
        n, m = nm
        for step in range(rnd.randint(1, 3)):  # S, dP read the stage (both halves) and K, V
            assert q_stage[s] == (n, m) and kv_stage[0] == n, (c, n, m, q_stage[s], kv_stage)
            assert handoff or halves[s] == [None, None], ("S / dP read staged dQ", c, use, halves[s])
            yield
        buf = use % buffers
        if single_buffer and broken != "no_pds_free_barrier":
            g = pds_free.gen; pds_free.arrive()
            while pds_free.gen == g: yield
        pds[buf][c] = use  # this consumer's keys of P, then of dS
        yield
        if broken != "no_pds_barrier":
            g = pds_ready.gen; pds_ready.arrive()
            while pds_ready.gen == g: yield
        # dQ, dV, dK read both halves of P / dS, K and (dV, dK) this consumer's halves of the
        # stage until their waits; with the hand-off dQ's wait comes first and its dQ is
        # handed over while dV / dK still run.
        reads = rnd.randint(1, 5)
        for step in range(reads):
            assert pds[buf] == [use, use], (c, use, pds[buf])
            assert q_stage[s] == (n, m) and kv_stage[0] == n, (c, n, m, q_stage[s], kv_stage)
            assert handoff or halves[s][c] is None, ("dV / dK read staged dQ", c, use, halves[s])
            if step == 0 and handoff:
                if use > 0 and broken != "no_dq_empty_wait":
                    while not dq_empty.done((use - 1) & 1): yield
                dq[c] = use
                dq_full_of(dq_full, use, broken)[0].arrive()
                added[c].append(use)
            if step == 0 and not handoff and broken == "stage_before_wait":
                halves[s][c] = use
            if broken == "early_q_release" and step == 0: q_empty[s].arrive()
            yield
        if handoff:
            if broken != "early_q_release": q_empty[s].arrive()
        else:
            halves[s][c] = use  # its dQ over its halves (after the consumer's barrier)
            yield
            dq_staged[s].arrive()
            q_empty[s].arrive()
            added[c].append(use)

    def consumer(c):
        yield from consume_walk(walk, S, c, rnd, broken, kv_full, kv_empty, q_full, kv_stage, epilogue_bar,
                                staged, lambda use, s, nm: block(c, use, s, nm))

    def landed(stage, s):  # a stage's copy lands: its halves hold Q and dO again
        if stage is q_stage: halves[s] = [None, None]

    uses = sum(blocks for _, blocks in walk)
    added_staged = []  # staged: uses whose reductions the dQ thread issued
    live = [producer(), consumer(0), consumer(1)] + ([dq_warp(0), dq_warp(1)] if ordered and handoff else []) + \
        ([] if handoff else [staged_adds()])
    def tick():
        for r in list(reductions):  # staged dQ: read from the stage, then completed
            if r[3] > 0:
                assert halves[r[0]] == [r[1], r[1]], ("the stage refilled under a reduction", r, halves)
                r[3] -= 1
            elif r[4] > 0:
                r[4] -= 1
            else:
                reductions.remove(r)

    simulate(live, pending, rnd, walk, S, seed, landed, tick)
    assert added == [list(range(uses))] * 2, (walk, added)
    if handoff:
        assert reduced == list(range(uses)), (walk, reduced)
    if not handoff:
        assert added_staged == list(range(uses)), (walk, added_staged)
    if ordered and not handoff:
        assert published == list(range(uses)), (walk, published)


def run_pds_do1(walk, S, seed, broken=None):
    """The d256 schedule (bwd_kernel_sm90_pds.cuh with Sm90BwdPdSTraits' kDqStaged: 80-key blocks),
    with one dO stage beside S Q stages; walk and S as run(). The producer loads Q / lse / dsum
    into the Q ring (q_full / q_empty) and dO into its one stage (do_full / do_empty, the two
    consumers' arrivals). P and dS have one buffer each. Each consumer's dV (reads dO and P) comes
    first: it releases dO once dV completes, while dQ (dS, K) and dK (its half of the Q stage, dS)
    still run. dQ is computed in two column halves: the first, once it completes, goes into a
    region of the consumer's own, where consumer 1's reaches into the P buffer (the spare shared
    memory holds three of the four 8 KB boxes), so both pass the p_read barrier (every dV, the P
    buffer's reader, completed) first, and arrives on dq_region_staged; the second, once dK
    completed, over the consumer's half of the Q stage (as run_pds), and arrives on dq_staged. The
    dQ thread reduces the region's boxes once both consumers staged them and arrives on extra_read
    once they were read, then the Q stage's once both staged those, and arrives on q_empty once
    they were read; a consumer waits for extra_read before it writes the next P (and so the next
    region); P's readers (every dV) are behind the p_read barrier of the block before, and dS's
    (the other consumer's dK and second dQ product) behind a pds_free barrier before the next dS.
    (A consumer's half of the Q stage is the head-dim columns of its own dK^T rows: only its dK
    reads them after S. The dQ thread's wait between key blocks and the ordered dQ are run_pds's,
    left out here.)"""
    rnd = random.Random(seed)
    q_full = [MBar(1) for _ in range(S)]; q_empty = [MBar(3) for _ in range(S)]
    do_full = MBar(1); do_empty = MBar(2)
    dq_staged = [MBar(2) for _ in range(S)]; extra_read = MBar(1); region_staged = MBar(2)
    kv_full = MBar(1); kv_empty = MBar(2)
    pds_ready = NBar(2); pds_free = NBar(2); p_read = NBar(2); epilogue_bar = NBar(2); staged = [False, False]
    q_stage = [None] * S; do_stage = [None]; kv_stage = [None]
    halves = [[None, None] for _ in range(S)]  # [stage][consumer] -> use whose dQ half is staged there
    extra = [None, None]  # [consumer] -> use whose other dQ half is in its region (consumer 1's: in P too)
    p_buf, ds_buf = [None, None], [None, None]  # [consumer] -> use whose keys it holds (None: dQ there)
    pending, reductions, reduced = [], [], []
    uses = sum(blocks for _, blocks in walk)

    def load_do(use, block):  # dO into its one stage once both consumers' dV of the use before completed
        yield
        if use >= 1 and broken != "no_do_empty_wait":
            while not do_empty.done((use - 1) & 1): yield
        pending.append([rnd.randint(1, 8), do_stage, 0, block, do_full])

    def producer():
        yield from load_walk(walk, S, rnd, pending, (kv_full, kv_empty, kv_stage), (q_full, q_empty, q_stage), load_do)

    def staged_adds():  # the producer's dQ thread, block by block: the region's boxes, then the Q stage's
        for use in range(uses):
            s = use % S
            if broken != "no_region_wait":
                while not region_staged.done(use & 1): yield
            assert extra == [use, use], ("the region reduced before both consumers staged it", use, extra)
            r = ["region", use, rnd.randint(1, 6)]
            reductions.append(r)
            while r[2] > 0: yield  # the bulk reductions read the region and the P box
            extra_read.arrive()
            while not dq_staged[s].done((use // S) & 1): yield
            assert halves[s] == [use, use], ("reduced before both staged", use, halves[s])
            r = [s, use, rnd.randint(1, 6)]
            reductions.append(r)
            while r[2] > 0: yield  # the bulk reductions read the Q stage's halves
            reduced.append(use)
            q_empty[s].arrive()
            yield

    def block(c, use, s, nm):
        n, m = nm
        while not do_full.done(use & 1): yield
        for _ in range(rnd.randint(1, 3)):  # S, dP: the Q stage, dO, K, V
            assert q_stage[s] == (n, m) and do_stage[0] == (n, m) and kv_stage[0] == n, \
                (c, n, m, q_stage[s], do_stage, kv_stage)
            assert halves[s] == [None, None], ("S / dP read staged dQ", c, use, halves[s])
            yield
        # The reductions of the block before read the region and the P box.
        if use > 0 and broken != "no_extra_wait":
            while not extra_read.done((use - 1) & 1): yield
        p_buf[c] = use
        yield
        if broken != "no_pds_free_barrier":  # the other consumer's dK, dQ of the block before read dS
            g = pds_free.gen; pds_free.arrive()
            while pds_free.gen == g: yield
        ds_buf[c] = use
        yield
        g = pds_ready.gen; pds_ready.arrive()
        while pds_ready.gen == g: yield
        for _ in range(rnd.randint(2, 4)):  # dV: dO and both halves of P
            assert do_stage[0] == (n, m) and p_buf == [use, use], (c, use, do_stage, p_buf)
            yield
            if broken == "early_do_release" and _ == 0: do_empty.arrive()
        if broken != "early_do_release": do_empty.arrive()  # dV completed: dO is free

        def dq_dk_reads():  # dQ's halves, dK: dS, K, its half of the Q stage
            for _ in range(rnd.randint(1, 3)):
                assert ds_buf == [use, use] and kv_stage[0] == n and q_stage[s] == (n, m) and halves[s][c] is None, \
                    (c, use, ds_buf, kv_stage, q_stage[s], halves[s])
                yield
        yield from dq_dk_reads()  # dQ's first column half completes (dK still runs)
        if broken != "no_p_read_barrier":
            g = p_read.gen; p_read.arrive()
            while p_read.gen == g: yield
        extra[c] = use  # the first half into the region
        if c == 1: p_buf[0] = p_buf[1] = None  # consumer 1's last box over P (both halves of it)
        yield
        region_staged.arrive()
        yield from dq_dk_reads()  # dK and dQ's second half (issued after the first completed)
        if broken == "stage_before_dk": halves[s][c] = use; yield
        yield from dq_dk_reads()
        halves[s][c] = use  # the second half over its half of the Q stage, once dK completed
        yield
        dq_staged[s].arrive()
        q_empty[s].arrive()

    def consumer(c):
        yield from consume_walk(walk, S, c, rnd, broken, kv_full, kv_empty, q_full, kv_stage, epilogue_bar,
                                staged, lambda use, s, nm: block(c, use, s, nm))

    def landed(stage, s):
        if stage is q_stage: halves[s] = [None, None]

    def tick():  # the reductions read the region and the P box, or the Q stage's halves
        for r in list(reductions):
            if r[0] == "region":
                assert extra == [r[1], r[1]] and p_buf == [None, None], ("the region or P rewritten under a reduction", r, extra, p_buf)
            else:
                assert halves[r[0]] == [r[1], r[1]], ("the Q stage refilled under a reduction", r, halves)
            r[2] -= 1
            if r[2] <= 0: reductions.remove(r)

    simulate([producer(), consumer(0), consumer(1), staged_adds()], pending, rnd, walk, S, seed, landed, tick)
    assert reduced == list(range(uses)), (walk, reduced)


def random_walk(seed):
    rnd = random.Random(seed)
    return [(n, rnd.choice([0, 0, 1, 2, 3, 5, 8])) for n in range(rnd.randint(1, 5))]


def one_key_block(seed):
    """The ordered dQ's walk: one key block per CTA, 1 to 9 query blocks."""
    return [(0, random.Random(seed).randint(1, 9))]


def caught(model, broken, seeds=400, **kw):
    """How many of the random walks expose the broken variant (an assertion or a deadlock)."""
    hits = 0
    for seed in range(seeds):
        try:
            walk = one_key_block(seed) if kw.get("ordered") or kw.get("split") else random_walk(seed)
            model(walk, 2, seed, broken=broken, **kw)
        except AssertionError:
            hits += 1
    return hits


if __name__ == "__main__":
    cases = 0
    for seed in range(3000):
        walk = random_walk(seed)
        for S in (2, 3):
            run(walk, S, seed)
            run_pds(walk, S, seed)
            run_pds(walk, S, seed, handoff=True)
            run_pds(walk, S, seed, handoff=True, single_buffer=True)
            run_pds_do1(walk, S, seed)
            if seed < 1000:
                run(one_key_block(seed), S, seed, split=True)
                run_pds(one_key_block(seed), S, seed, ordered=True)
                run_pds(one_key_block(seed), S, seed, ordered=True, handoff=True)
                run_pds(one_key_block(seed), S, seed, ordered=True, handoff=True, single_buffer=True)
            cases += 1
    print(f"bwd ws protocol: {cases} random walks x 3 schedules (the P/dS one also with the dQ hand-off, with "
          "one P/dS buffer too; 2000 of each also with the ordered dQ; the one-dO-stage form at 80 keys), no deadlock, "
          "every stage, dS, P/dS, dQ buffer and staged dQ and the staged dK/dV epilogue as expected")
    for model, broken in ((run, "single_ds"), (run, "no_dq_empty_wait"), (run_pds, "single_pds"),
                          (run_pds, "no_pds_barrier"), (run_pds, "early_q_release"),
                          (run, "no_epilogue_barrier"), (run_pds, "no_epilogue_barrier"),
                          (run, "stage_every_block"), (run_pds, "stage_every_block"), (run, "release_before_dk")):
        hits = caught(model, broken)
        assert hits > 0, f"{model.__name__} broken={broken}: not caught by any walk"
        print(f"  broken variant {model.__name__}/{broken}: caught on {hits} of 400 walks")
    hits = caught(run_pds, "no_dq_empty_wait", handoff=True)
    assert hits > 0, "run_pds handoff broken=no_dq_empty_wait: not caught by any walk"
    print(f"  broken variant run_pds(handoff)/no_dq_empty_wait: caught on {hits} of 400 walks")
    hits = caught(run_pds, "no_pds_free_barrier", handoff=True, single_buffer=True)
    assert hits > 0, "run_pds handoff single_buffer broken=no_pds_free_barrier: not caught by any walk"
    print(f"  broken variant run_pds(handoff, one buffer)/no_pds_free_barrier: caught on {hits} of 400 walks")
    for model, kw in ((run, dict(split=True)), (run_pds, dict(ordered=True, handoff=True))):
        for broken in ("no_dq_empty_wait", "one_dq_full"):
            hits = caught(model, broken, seeds=100, **kw)
            assert hits > 0, f"{model.__name__} {kw} broken={broken}: not caught by any walk"
            print(f"  broken variant {model.__name__}({kw})/{broken}: caught on {hits} of 100 walks")
    for broken in ("stage_before_wait", "release_before_read", "retire_after_read", "no_staged_wait"):
        hits = caught(run_pds, broken)
        assert hits > 0, f"run_pds broken={broken}: not caught by any walk"
        print(f"  broken variant run_pds/{broken}: caught on {hits} of 400 walks")
    for broken in ("no_do_empty_wait", "early_do_release", "no_extra_wait", "no_p_read_barrier", "stage_before_dk",
                   "no_region_wait", "no_pds_free_barrier", "stage_every_block"):
        hits = caught(run_pds_do1, broken)
        assert hits > 0, f"run_pds_do1 broken={broken}: not caught by any walk"
        print(f"  broken variant run_pds_do1/{broken}: caught on {hits} of 400 walks")
    hits = caught(run_pds, "retire_after_read", seeds=100, ordered=True)
    assert hits > 0, "run_pds ordered broken=retire_after_read: not caught by any walk"
    print(f"  broken variant run_pds(ordered)/retire_after_read: caught on {hits} of 100 walks")
