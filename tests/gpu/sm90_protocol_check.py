"""Host-side model of the synchronisation of src/cuda/kernels/fwd_kernel_sm90.cuh.

The producer and the consumer warpgroups (two, or three: `consumers`) are generators; mbarriers complete phases (waits are
by parity, as mbarrier.try_wait.parity), named barriers gather sync + arrive. Copies land after a
random delay, the roles run in random interleavings. A CTA runs a sequence of tiles (the persistent
grid), each with its own number of K/V blocks (0 included); the K/V ring position runs on across
tiles, and Q's buffer is handed over by q_full / q_empty: O is staged either in Q's buffer (Q
released after O's store) or in a buffer of its own (own_o: Q released once the tile's last S is
done). Checks: no deadlock, every product reads the block (tile, index) it expects from its stage,
every S reads this tile's Q from its issue to its completion, the O store reads this tile's O (not
a next Q or another consumer's next O landed over it), the ping-pong ring's barriers end balanced,
and no role arrives twice at a named barrier before it completes (the hardware would count both).
With `qbufs` = 2 (own_o only) tile t's Q is in buffer t % 2, loaded before the tile's first K block
once the consumers released the buffer's previous tile.
With claims, each next tile is handed from the producer to all three roles through a ring of two
slots (tile_full / tile_empty), as when the CTAs claim their tiles from a counter: every role must
read each tile's index, in order, from a slot not yet overwritten. With `ranges`, each consumer computes only
a random contiguous part of each tile's blocks (its rows' own range under a mask, none for rows past
the sequence's end) and passes the others: their turns and releases without products. Run: python3 tests/gpu/sm90_protocol_check.py (ctest: sm90_protocol_check)
"""
import random

EVENTS = [0]  # arrivals and landed copies so far: a run that adds none for a long time is stuck


class MBar:
    def __init__(self, count): self.count, self.pending, self.phase = count, count, 0

    def arrive(self):
        EVENTS[0] += 1
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def done(self, parity):  # try_wait.parity: the phase with this parity has completed
        return (self.phase & 1) != parity


class NBar:  # named barrier: completes when `count` arrivals (sync or arrive) gathered
    def __init__(self, count): self.count, self.arrived, self.gen, self.who = count, 0, 0, set()

    def arrive(self, who):
        EVENTS[0] += 1
        assert who not in self.who, ("a second arrival of one role in one phase", who)
        self.who.add(who)
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived = 0
            self.gen += 1
            self.who = set()


def run(tiles, S, seed, own_o=False, claims=False, consumers=2, ranges=False, qbufs=1):
    rnd = random.Random(seed)
    W = consumers
    # own[t][c] = (lead, count): consumer c computes the blocks at positions lead .. lead + count - 1
    own = []
    for n in tiles:
        parts = []
        for c in range(W):
            count = rnd.randint(0, n) if ranges else n
            parts.append((rnd.randint(0, n - count), count))
        own.append(parts)
    q_full = [MBar(1) for _ in range(qbufs)]; q_empty = [MBar(W) for _ in range(qbufs)]  # tile t: buffer t % qbufs
    k_full = [MBar(1) for _ in range(S)]; v_full = [MBar(1) for _ in range(S)]
    k_empty = [MBar(W) for _ in range(S)]; v_empty = [MBar(W) for _ in range(S)]
    turn = [NBar(2) for _ in range(W)]  # turn c: consumer c waits, consumer c - 1 (in the ring) arrives
    epilogue = NBar(W)
    kstage = [None] * S; vstage = [None] * S
    qbuf = [None] * qbufs  # ('Q', tile) once a Q copy landed, ('O', tile) once the consumers staged O there
    obuf = qbuf if not own_o else [None] * W  # where O is staged (own_o: each consumer its rows)
    pending = []       # async copies: [when, stage list, index, value, barrier]
    tile_full = [MBar(1) for _ in range(2)]; tile_empty = [MBar(W + 1) for _ in range(2)]
    tile_slot = [None, None]

    def next_tile(t, writer):  # after tile t: publication t (the index of tile t + 1), read by all roles
        if not claims: return
        slot = t & 1
        if writer:
            if t >= 2:
                while not tile_empty[slot].done(((t >> 1) - 1) & 1): yield
            tile_slot[slot] = t + 1
            tile_full[slot].arrive()
        while not tile_full[slot].done((t >> 1) & 1): yield
        yield
        assert tile_slot[slot] == t + 1, ("tile slot", t, tile_slot)
        tile_empty[slot].arrive()

    def producer():
        ring_base = 0
        for t, num_blocks in enumerate(tiles):
            def block(idx, stage, full, empty):
                r = ring_base + idx; s = r % S
                if r >= S:
                    while not empty[s].done(((r // S) - 1) & 1): yield
                pending.append([rnd.randint(1, 8), stage, s, (t, idx), full[s]])
            def produce_q():  # into buffer t % qbufs once its previous tile is done with it
                b = t % qbufs
                if t >= qbufs:
                    while not q_empty[b].done(((t - qbufs) // qbufs) & 1): yield
                pending.append([rnd.randint(1, 5), qbuf, b, ('Q', t), q_full[b]])
            if qbufs > 1: yield from produce_q()  # two buffers: Q first
            if num_blocks > 0: yield from block(0, kstage, k_full, k_empty)
            if qbufs == 1: yield from produce_q()
            if num_blocks > 0: yield from block(0, vstage, v_full, v_empty)
            for idx in range(1, num_blocks):
                yield from block(idx, kstage, k_full, k_empty)
                yield from block(idx, vstage, v_full, v_empty)
                yield
            ring_base += num_blocks
            yield from next_tile(t, True)

    def consumer(c):
        ring_base = 0

        def sync(bar):
            g = bar.gen; bar.arrive(c)
            while bar.gen == g: yield

        def take_turn():  # every issue: a tile's first S, each step's S and P V, its last P V
            yield from sync(turn[c])

        def pass_turn():
            turn[(c + 1) % W].arrive(c)

        if c == W - 1: turn[0].arrive(c)  # the ring opens once, and runs on across tiles
        for t, num_blocks in enumerate(tiles):
            def wait_full(bars, idx, stage):
                r = ring_base + idx
                while not bars[r % S].done((r // S) & 1): yield
                assert stage[r % S] == (t, idx), (c, t, idx, stage)

            b = t % qbufs  # this tile's Q buffer

            def release_q_after_s(last_s):
                if own_o and last_s: q_empty[b].arrive()

            def pass_block(idx):  # a block this consumer's rows do not see
                yield from wait_full(k_full, idx, kstage)
                yield from take_turn()
                pass_turn()
                k_empty[(ring_base + idx) % S].arrive()
                yield from wait_full(v_full, idx, vstage)
                v_empty[(ring_base + idx) % S].arrive()

            lead, count = own[t][c]
            while not q_full[b].done((t // qbufs) & 1): yield
            release_q_after_s(count == 0)
            for idx in range(lead):
                yield from pass_block(idx)
            if count > 0:
                yield from wait_full(k_full, lead, kstage)
                yield from take_turn()
                assert qbuf[b] == ('Q', t), (c, t, qbuf)  # S issued
                pass_turn()
                yield
                assert qbuf[b] == ('Q', t), (c, t, qbuf)  # S done
                k_empty[(ring_base + lead) % S].arrive()
                release_q_after_s(count == 1)
            for idx in range(lead + 1, lead + count):
                r = ring_base + idx
                yield from wait_full(k_full, idx, kstage)
                yield from wait_full(v_full, idx - 1, vstage)
                yield from take_turn()
                assert qbuf[b] == ('Q', t), (c, t, qbuf)  # S issued
                yield
                pass_turn()
                yield
                assert qbuf[b] == ('Q', t), (c, t, qbuf)  # S done
                k_empty[r % S].arrive()
                release_q_after_s(idx == lead + count - 1)
                yield
                v_empty[(r - 1) % S].arrive()
            if count > 0:
                yield from wait_full(v_full, lead + count - 1, vstage)
                yield from take_turn()
                pass_turn()
                yield
                v_empty[(ring_base + lead + count - 1) % S].arrive()
            elif num_blocks > 0:  # the turn of a last P V
                yield from take_turn()
                pass_turn()
            for idx in range(lead + count, num_blocks):
                yield from pass_block(idx)
            part = c if own_o else 0       # own_o: a consumer stages and stores its own rows alone
            if not own_o: yield from sync(epilogue)  # all are done with Q's buffer
            obuf[part] = ('O', t)
            if not own_o: yield from sync(epilogue)  # O staged by all
            yield
            assert obuf[part] == ('O', t), (c, t, obuf)  # the store reads this tile's O
            if not own_o: q_empty[b].arrive()
            ring_base += num_blocks
            yield from next_tile(t, False)
        if c == 0: yield from take_turn()  # the turn the last consumer's last pass left open

    procs = [producer()] + [consumer(c) for c in range(W)]
    alive = list(procs); stall = 0
    while alive or pending:
        before = EVENTS[0]
        for p in pending[:]:
            p[0] -= 1
            if p[0] <= 0:
                pending.remove(p)
                p[1][p[2]] = p[3]
                p[4].arrive()
        if alive:
            p = rnd.choice(alive)
            try:
                next(p)
            except StopIteration:
                alive.remove(p); EVENTS[0] += 1
        # Spinning on a barrier is no progress: only arrivals, landed copies and finished roles are.
        stall = 0 if EVENTS[0] != before else stall + 1
        if stall > 2000: raise RuntimeError(f"deadlock tiles={tiles} S={S} seed={seed}")
    for t in turn: assert t.arrived == 0, ("unbalanced named barrier", tiles, t.arrived)
    for b in range(qbufs):
        uses = len(range(b, len(tiles), qbufs))
        assert q_empty[b].phase == uses and q_full[b].phase == uses


if __name__ == "__main__":
    rnd = random.Random(0)
    # O in Q's buffer with a persistent grid is the value-dim instance's form (192 / 128: its tile
    # leaves no room for O's own buffer), claims included (a causal call).
    # Three consumers are the d <= 64 tile (O in its own buffer).
    # With O in its own buffer two consumers have two Q buffers (d65-128); three (d <= 64) and d192 one.
    for consumers, own_o, claims, qbufs in ((2, False, False, 1), (2, False, True, 1), (2, True, False, 1),
                                            (2, True, False, 2), (2, True, True, 2), (3, True, False, 1),
                                            (3, True, True, 1)):
        for S in (2, 3):
            for ranges in (False, True):
                for n in range(0, 9):  # one tile per CTA (grid = tiles)
                    for seed in range(100):
                        run([n], S, seed, own_o, claims, consumers, ranges, qbufs)
                for seed in range(1000):  # several tiles per CTA, empty ones included
                    tiles = [rnd.choice([0, 1, 1, 2, 3, 5, 8]) for _ in range(rnd.randint(2, 6))]
                    run(tiles, S, seed, own_o, claims, consumers, ranges, qbufs)
    print("ok")
