"""How the benchmarks time a row (bench/bench_common.py: balanced turns, a turn one do_bench or a few
calls between CUDA events), against a simulated GPU clock. The simulated device runs a call at a
speed set by the call before it, as the 700 W cap does (docs/perf-log.md, session 49: a kernel timed
right after another reads several percent slower), and the first call after an idle gap at the cool
card's speed (session 50: the entry timed first after a row's set-up read 1.4-2.7% ahead of a copy of
itself; session 51: the card slows down over a row, so the entry with the earliest turns of a row
reads ahead), so only a timing order that gives every side the same mix of predecessors and the
same mean place, and puts the gap before no timed turn, reports their true ratio."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_common  # noqa: E402


@pytest.fixture(autouse=True)
def no_lead_in_time(monkeypatch):
    """The simulated calls take no real time: a lead-in of one turn (test_lead_in_time times one)."""
    monkeypatch.setattr(bench_common, "LEAD_IN_S", 0.0)


class SimulatedDevice:
    """A clock in ms; a call of implementation `name` takes cost[name] times carry[previous], the
    clock that the call before it left (itself too: default 6% slower than a cold start), and the
    first call cost[name]."""

    def __init__(self, cost, carry=None):
        self.cost, self.carry, self.now, self.last, self.calls = cost, carry or {}, 0.0, None, []

    def fn(self, name):
        def call():
            self.now += self.cost[name] * (1.0 if self.last is None else self.carry.get(self.last, 1.06))
            self.last = name
            self.calls.append(name)
        return call

    def one_call(self, fn):
        """A turn of one call, timed on the simulated clock (time_turn for balanced_means)."""
        start = self.now
        fn()
        return self.now - start

    def install(self, monkeypatch):
        device = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                self.at = device.now

            def elapsed_time(self, end):
                return end.at - self.at

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


def test_alternation_of_two_and_the_true_ratio(monkeypatch):
    device = SimulatedDevice({"a": 1.0, "b": 1.03}, {"a": 1.06, "b": 1.02})
    device.install(monkeypatch)
    entries = [("a", device.fn("a"), None), ("b", device.fn("b"), None)]
    rates = bench_common.balanced_means(entries, 6, bench_common.event_timer(3), work=1.0)
    # A lead-in turn of a, then a b b a a b b a twice, three calls a turn.
    assert device.calls == ["a"] * 3 + [x for x in "abbaabba" * 2 for _ in range(3)]
    # Each side's turns follow a and b equally often: the time of a turn of x is
    # cost[x] * (mean carry + 2 carry[x]) / 3, whatever the order did.
    turn = {x: device.cost[x] * ((1.06 + 1.02) / 2 + 2 * device.carry[x]) / 3 for x in "ab"}
    assert rates["a"] / rates["b"] == pytest.approx(turn["b"] / turn["a"], rel=1e-9)


def test_back_to_back_order_biases_and_alternation_does_not(monkeypatch):
    # The same implementation twice: any ratio but 1 is the order's.
    device = SimulatedDevice({"a": 1.0, "b": 1.0})
    device.install(monkeypatch)
    entries = [("a", device.fn("a"), None), ("b", device.fn("b"), None)]

    timed_once = bench_common.event_timer(1)
    first, second = (timed_once(fn) for _, fn, _ in entries)  # a, then b right after it
    assert second / first == pytest.approx(1.06)
    rates = bench_common.balanced_means(entries, 20, bench_common.event_timer(1), work=1.0)
    assert rates["a"] == pytest.approx(rates["b"], rel=1e-9)


def test_alternation_of_many_is_balanced_against_carry_over(monkeypatch):
    # a and b the same implementation among four others that leave the clock differently, c with 3%
    # more work: every one follows every one equally often, so a and b read alike and c 3% slower.
    carry = {"a": 1.06, "b": 1.06, "c": 1.02, "fa2": 1.10, "cudnn": 0.97, "sm80": 1.0}
    device = SimulatedDevice({"a": 1.0, "b": 1.0, "c": 1.03, "fa2": 1.5, "cudnn": 0.8, "sm80": 2.0}, carry)
    device.install(monkeypatch)
    names = ["a", "sm80", "b", "c", "fa2", "cudnn"]
    entries = [(name, device.fn(name), None) for name in names]
    rates = bench_common.timed_rates(entries, 1, None, work=1.0, alternate=1)
    assert len(device.calls) == 1 + 6 * 24  # the lead-in, then 20 turns each rounded up to four orders of 36
    assert rates["a"] / rates["b"] == pytest.approx(1.0, rel=1e-9)
    assert rates["a"] / rates["c"] == pytest.approx(1.03, rel=1e-9)
    # The same entries in one fixed order (each after the same neighbour every round) are biased.
    fixed = {name: [] for name in names}
    device.last = names[-1]  # as in a steady state of the fixed order
    for _ in range(6):
        for name, fn, _ in entries:
            start = device.now
            fn()
            fixed[name].append(device.now - start)
    assert sum(fixed["a"]) / sum(fixed["b"]) != pytest.approx(1.0, abs=0.02)


def de_bruijn_order(n):
    """The plain order balanced for the turn before: each entry follows every entry, itself included,
    once when the order repeats (a de Bruijn sequence of pairs, FKM). The benchmarks used it, then its
    palindrome (mirrored_order below), before blocked_order; here it is the counter-example."""
    order, word = [], [0, 0, 0]

    def extend(t, p):
        if t > 2:
            if 2 % p == 0:
                order.extend(word[1:p + 1])
            return
        word[t] = word[t - p]
        extend(t + 1, p)
        for symbol in range(word[t - p] + 1, n):
            word[t] = symbol
            extend(t + 1, t)
    extend(1, 1)
    return order


def mirrored_order(n):
    """de_bruijn_order rotated to open and close with entry 0, then its reverse: balanced for the turn
    before and for a linear drift, but entry 0 takes every other place of the cycle's first and last
    few turns (0 1 0 2 0 3 ...)."""
    order = de_bruijn_order(n)
    order = order[1:] + order[:1]
    return order + order[::-1]


@pytest.mark.parametrize("n", range(1, 14))
def test_blocked_order(n):
    order = bench_common.blocked_order(n)
    assert len(order) == 2 * n * n and all(order.count(i) == 2 * n for i in range(n))
    cycle = order + order[:1]  # repeated, the order closes on itself
    assert sorted(zip(cycle, cycle[1:])) == sorted([(i, j) for i in range(n) for j in range(n)] * 2)
    assert order == order[::-1]  # so every entry's mean place is the middle
    assert all(sorted(order[k:k + n]) == list(range(n)) for k in range(0, len(order), n))  # one turn in n
    assert order[0] == order[-1] == 0  # the lead-in ends on the entry that opens the timed turns
    if n == 2:
        assert order == [0, 1, 1, 0, 0, 1, 1, 0]  # a b b a a b b a, the sink rows' order


class ClockWithMemory:
    """A card at its power cap: the clock runs at 1 - k * (recent power - its mean), the recent power an
    exponential average over tau ms of the power of whatever ran, and each implementation draws its
    own (ours and its copy the most, torch's FA2 and the mma.sync kernel less). A turn is one call of
    cost[name] ms at the unit clock."""

    def __init__(self, cost, power, tau=40.0, k=0.5):
        self.cost, self.power, self.tau, self.k = cost, power, tau, k
        self.mean = sum(power.values()) / len(power)
        self.recent = self.mean

    def one_call(self, name):
        left, elapsed, dt = self.cost[name], 0.0, 0.05
        while left > 1e-12:
            speed = 1.0 - self.k * (self.recent - self.mean)
            step = min(dt, left / speed)
            left -= step * speed
            elapsed += step
            self.recent += (self.power[name] - self.recent) * step / self.tau
        return elapsed


@pytest.mark.parametrize("scale, bunched_bias", [(1.0, 0.01), (1.0 / 16, 0.0)])
def test_clock_memory_of_several_turns(scale, bunched_bias):
    # Ours and a copy of it beside the forced mma.sync kernel, torch's FA2 and cuDNN, turns as long as
    # a 16k row's (12 ms) or a 1k row's. With a clock that remembers ~40 ms, in the mirrored de Bruijn
    # order ours (entry 0, its turns bunched at the cycle's ends) runs after more of its own power than
    # the copy and reads more than 1% behind it at 16k (an A/A on the H100 read 1-2.5%); with one turn
    # of every entry in every five (blocked_order), the two read within 0.3% at both lengths.
    cost = {name: ms * scale for name, ms in {"ours": 12, "sm80": 24, "a": 12, "fa2": 22, "cudnn": 12.5}.items()}
    power = {"ours": 1.0, "sm80": 0.6, "a": 1.0, "fa2": 0.7, "cudnn": 0.95}
    names = list(cost)

    card = ClockWithMemory(cost, power)
    mirrored = mirrored_order(len(names))
    times = {name: [] for name in names}
    for k, i in enumerate(mirrored * 3):  # a cycle's lead-in, then two timed
        ms = card.one_call(names[i])
        if k >= len(mirrored):
            times[names[i]].append(ms)
    ours_over_a = sum(times["ours"]) / sum(times["a"])
    assert ours_over_a > 1.0 + bunched_bias if bunched_bias else ours_over_a == pytest.approx(1.0, abs=0.003)

    card = ClockWithMemory(cost, power)
    for i in bench_common.blocked_order(len(names)):  # the same lead-in
        card.one_call(names[i])
    rates = bench_common.balanced_means([(name, name, None) for name in names], 20, card.one_call, work=1.0)
    assert rates["a"] / rates["ours"] == pytest.approx(1.0, abs=0.003)


def test_drift_over_a_row():
    # A card that slows down over the row (as after the set-up on the host: 4% per 10 units of
    # simulated time, a quarter over the row), two copies of one implementation beside three others:
    # in the plain de Bruijn order the copy with the earlier turns reads more than 3% ahead; in the
    # palindrome the benchmarks use within 0.5% (what is left: the turns' places in time are not
    # quite symmetric).
    class DriftingCall(SimulatedDevice):
        def __init__(self):
            super().__init__({})

        def fn(self, cost):
            def call():
                self.now += cost * (1.0 + 0.004 * self.now)
            return call

    costs = {"ours": 1.0, "sm80": 1.9, "a": 1.0, "fa2": 1.8, "cudnn": 0.95}
    device = DriftingCall()
    entries = [(name, device.fn(cost), None) for name, cost in costs.items()]
    plain = {name: [] for name in costs}
    for i in de_bruijn_order(len(entries)):
        plain[entries[i][0]].append(device.one_call(entries[i][1]))
    assert sum(plain["a"]) / sum(plain["ours"]) > 1.03
    device.now = 0.0
    rates = bench_common.balanced_means(entries, 1, device.one_call, work=1.0)
    assert rates["ours"] / rates["a"] == pytest.approx(1.0, abs=0.005)


def test_lead_in_time():
    # Untimed turns in the order until lead_in_s of the clock has passed, ending on the order's last
    # entry; then the timed turns from the order's start.
    device = SimulatedDevice({"a": 1.0, "b": 2.0})
    entries = [(name, device.fn(name), None) for name in "ab"]

    bench_common.balanced_means(entries, 4, device.one_call, work=1.0, lead_in_s=5.0, clock=lambda: device.now)
    lead_in = device.calls[:-8]
    assert lead_in == list("abba") and device.calls[-8:] == list("abbaabba")


def test_timed_rates_picks_the_turn(monkeypatch):
    device = SimulatedDevice({"a": 2.0})
    device.install(monkeypatch)
    entries = [("a", device.fn("a"), None)]
    seen = []

    def bench_ms(fn):
        seen.append(fn)
        fn()
        return 4.0

    assert bench_common.timed_rates(entries, 3, bench_ms, work=8.0) == {"a": 2.0}  # do_bench turns
    assert len(seen) == 5 and device.calls == ["a"] * 5  # the lead-in and four turns (two orders of two)
    seen.clear()
    device.calls.clear()
    # CALLS calls a turn between events (no bench_ms), ALTERNATE_ROUNDS turns where fewer than two
    # rounds are asked for.
    rates = bench_common.timed_rates(entries, 1, bench_ms, work=8.0, alternate=2)
    assert rates == {"a": pytest.approx(8.0 / (2.0 * 1.06))}  # every call after one of its own
    assert not seen and device.calls == ["a"] * 2 * (1 + bench_common.ALTERNATE_ROUNDS)
    device.calls.clear()
    bench_common.timed_rates(entries, 5, bench_ms, work=8.0, alternate=1)
    assert device.calls == ["a"] * 7


def test_turns_after_a_gap():
    # The grids' entries: a copy of ours ("a") beside torch's and cuDNN's, the row's set-up an idle
    # gap before them (the simulated card cool: its first call unslowed), a turn one call (the
    # clock's memory outlasts a do_bench on the real card). A round-robin whose first round follows
    # the gap gives the entry that starts it a cold turn; balanced turns after a lead-in read the two
    # copies alike, and cuDNN at its true ratio to them.
    carry = {"ours": 1.06, "a": 1.06, "fa2": 1.02, "cudnn": 1.05}
    device = SimulatedDevice({"ours": 1.0, "a": 1.0, "fa2": 1.8, "cudnn": 0.95}, carry)
    entries = [(name, device.fn(name), None) for name in ("ours", "a", "fa2", "cudnn")]

    best = {}
    for r in range(2):  # a round-robin, best of two rounds
        for name, fn, _ in entries[r:] + entries[:r]:
            best[name] = min(best.get(name, 1e9), device.one_call(fn))
    assert best["a"] / best["ours"] == pytest.approx(1.05)  # ours cold after the gap; a at best after cuDNN
    device.last = None  # the next row's gap
    device.calls.clear()
    rates = bench_common.timed_rates(entries, 1, device.one_call, work=1.0)
    assert rates["ours"] == pytest.approx(rates["a"], rel=1e-9)
    assert rates["ours"] / rates["cudnn"] == pytest.approx(0.95, rel=1e-9)  # the same mix of clocks
    assert device.calls[0] == "ours" and len(device.calls) == 1 + 4 * 8  # the lead-in: the order's last entry


@pytest.mark.parametrize("name, prefix", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
                                          ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
                                          ("", "gpu")])
def test_outputs_named_for_the_card(name, prefix, tmp_path):
    """A benchmark run on an H100 writes h100-*.csv, never files named for the H200's records; --replot
    names the chart for the card in the CSV's gpu column."""
    assert bench_common.card_prefix(name) == prefix
    assert bench_common.card_file(tmp_path, name, "forward.csv") == tmp_path / f"{prefix}-forward.csv"
    assert bench_common.replot_file(tmp_path, [{"gpu": name}], "forward.png").name == \
        ("h200" if not name else prefix) + "-forward.png"
    assert bench_common.replot_file(tmp_path, [], "forward.png").name == "h200-forward.png"
