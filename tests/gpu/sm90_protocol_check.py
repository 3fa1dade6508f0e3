"""Host-side model of the synchronisation of src/cuda/kernels/fwd_kernel_sm90.cuh.

The producer and the two consumer warpgroups are generators; mbarriers complete phases (waits are
by parity, as mbarrier.try_wait.parity), named barriers gather sync + arrive. Copies land after a
random delay, the three run in random interleavings. Checks, for 0..8 K/V blocks, 2 and 3 stages:
no deadlock, every product reads the block it expects from its stage, and the ping-pong barriers
end balanced (every wait matched by one arrive). Run: python3 tests/gpu/sm90_protocol_check.py (ctest: sm90_protocol_check)
"""
import random

EVENTS = [0]  # arrivals and landed copies so far: a run that adds none for a long time is stuck

class MBar:
    def __init__(self, count): self.count, self.pending, self.phase = count, count, 0
    def arrive(self):
        EVENTS[0] += 1
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0: self.phase += 1; self.pending = self.count
    def done(self, parity):  # try_wait.parity: phase with this parity has completed
        return (self.phase & 1) != parity

class NBar:  # named barrier: completes when `count` arrivals (sync or arrive) gathered
    def __init__(self, count): self.count, self.arrived, self.gen = count, 0, 0
    def arrive(self):
        EVENTS[0] += 1
        self.arrived += 1
        if self.arrived == self.count: self.arrived = 0; self.gen += 1

def run(num_blocks, S, seed):
    rnd = random.Random(seed)
    q_full = MBar(1); k_full = [MBar(1) for _ in range(S)]; v_full = [MBar(1) for _ in range(S)]
    k_empty = [MBar(2) for _ in range(S)]; v_empty = [MBar(2) for _ in range(S)]
    turn = [NBar(2), NBar(2)]
    kstage = [None] * S; vstage = [None] * S
    pending = []  # async copies: (when, stage list, s, value, barrier)
    def producer():
        if num_blocks == 0: return
        pending.append([rnd.randint(1, 5), None, None, None, q_full])
        for idx in range(num_blocks):
            s = idx % S; par = ((idx // S) - 1) & 1
            if idx >= S:
                while not k_empty[s].done(par): yield
            pending.append([rnd.randint(1, 8), kstage, s, idx, k_full[s]])
            if idx >= S:
                while not v_empty[s].done(par): yield
            pending.append([rnd.randint(1, 8), vstage, s, idx, v_full[s]])
            yield
    def consumer(c):
        steps = num_blocks - 1
        def wait_full(bars, idx, stage):
            while not bars[idx % S].done((idx // S) & 1): yield
            assert stage[idx % S] == idx, (c, idx, stage)
        def take_turn():
            g = turn[c].gen; turn[c].arrive()
            while turn[c].gen == g: yield
        def pass_turn(k):
            if c == 0 or k + 1 < steps: turn[1 - c].arrive()
        if num_blocks > 0:
            if c == 1 and steps > 0: turn[0].arrive()
            while not q_full.done(0): yield
            yield from wait_full(k_full, 0, kstage)
            k_empty[0].arrive()
        for idx in range(1, num_blocks):
            yield from wait_full(k_full, idx, kstage)
            yield from wait_full(v_full, idx - 1, vstage)
            yield from take_turn()
            yield
            pass_turn(idx - 1)
            k_empty[idx % S].arrive()
            yield
            v_empty[(idx - 1) % S].arrive()
        if num_blocks > 0:
            yield from wait_full(v_full, num_blocks - 1, vstage)
    procs = [producer(), consumer(0), consumer(1)]
    alive = list(procs); stall = 0
    while alive or pending:
        before = EVENTS[0]
        for p in pending[:]:
            p[0] -= 1
            if p[0] <= 0:
                pending.remove(p)
                if p[1] is not None: p[1][p[2]] = p[3]
                p[4].arrive()
        if alive:
            p = rnd.choice(alive)
            try: next(p)
            except StopIteration: alive.remove(p); EVENTS[0] += 1
        # Spinning on a barrier is no progress: only arrivals, landed copies and finished roles are.
        stall = 0 if EVENTS[0] != before else stall + 1
        if stall > 2000: raise RuntimeError(f"deadlock num_blocks={num_blocks} S={S} seed={seed}")
    for t in turn: assert t.arrived == 0, ("unbalanced named barrier", num_blocks, t.arrived)

for S in (2, 3):
    for n in range(0, 9):
        for seed in range(300):
            run(n, S, seed)
print("ok")
