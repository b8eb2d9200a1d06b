#!/usr/bin/python3
"""Golden values for src/optim/lr_schedule_test.cc.

Simulates DeepSpeed's scheduler protocol independently of the C++ code: the constructor writes an
lr (and OneCycle's betas) into the optimizer, the optimizer update runs with what is written, and
each successful update is followed by scheduler.step() (last_batch_iteration += 1). Formulas are
those of docs/reference (DeepSpeed runtime/lr_schedules.py at 0.16.5). Prints C++ arrays:
the lr used by updates 1..N (and beta1 for OneCycle). Plain Python, no dependencies:
    /usr/bin/python3 tools/golden/lr_schedules.py
"""
import math


class Sched:
    """Base: t = last_batch_iteration, starts at -1; `written` = what the optimizer holds."""

    def __init__(self):
        self.t = -1
        self.written = self.construct()

    def construct(self):
        return (self.lr(), None)

    def step(self):
        self.t += 1
        self.written = (self.lr(), self.mom())

    def mom(self):
        return None


class RangeTest(Sched):
    def __init__(self, min_lr, size, rate, stair):
        self.p = (min_lr, size, rate, stair)
        super().__init__()

    def lr(self):
        min_lr, size, rate, stair = self.p
        i = (self.t + 1) / size
        if stair:
            i = math.floor(i)
        return min_lr * (1 + rate * i)


class OneCycle(Sched):
    def __init__(self, lo, hi, first, second, lr_rate, dss, mom_lo, mom_hi, mom_rate):
        self.lo, self.hi, self.first, self.second = lo, hi, float(first), float(second)
        self.lr_rate, self.dss, self.mom_lo, self.mom_hi, self.mom_rate = (lr_rate, dss, mom_lo,
                                                                           mom_hi, mom_rate)
        super().__init__()

    def construct(self):
        return (self.lo, self.mom_lo)  # min lr and MIN momentum at construction

    def frac(self):
        total = self.first + self.second
        b = self.t + 1
        x = 1.0 + b / total - math.floor(1 + b / total)
        r = self.first / total
        return x / r if x <= r else (x - 1) / (r - 1)

    def lr(self):
        total = self.first + self.second
        if self.t < total:
            return self.lo + (self.hi - self.lo) * self.frac()
        if self.dss == 0 or self.lr_rate == 0:
            return self.lo
        return self.lo / (1 + self.lr_rate * (self.t - total + 1) / self.dss)

    def mom(self):
        total = self.first + self.second
        if self.t < total:
            return self.mom_hi - (self.mom_hi - self.mom_lo) * self.frac()
        if self.dss == 0 or self.mom_rate == 0:
            return self.mom_hi
        return self.mom_hi * (1 + self.mom_rate * (self.t - total + 1) / self.dss)


class Warmup(Sched):
    def __init__(self, lo, hi, n, kind, total=None):
        self.lo, self.hi, self.n, self.kind, self.total = lo, hi, max(2, n), kind, total
        super().__init__()

    def gamma(self):
        if self.t < self.n:
            if self.kind == "log":
                return math.log(self.t + 1) / math.log(self.n)
            return self.t / self.n
        if self.total is None:
            return 1.0
        return max(0.0, (self.total - self.t) / max(1.0, self.total - self.n))

    def lr(self):
        if self.t < 0:
            return self.lo
        return self.lo + (self.hi - self.lo) * self.gamma()


class Cosine(Sched):
    def __init__(self, base, total, n, wmr, cmr, kind):
        self.base, self.total, self.n, self.wmr, self.cmr, self.kind = (base, total, max(2, n),
                                                                        wmr, cmr, kind)
        super().__init__()

    def lr(self):
        if self.t < 0:
            return 0.0
        if self.t < self.n:
            w = math.log(self.t + 1) / math.log(self.n) if self.kind == "log" else self.t / self.n
            return self.base * (self.wmr + (1 - self.wmr) * w)
        c = (1 + math.cos(math.pi * (self.t - self.n + 1) / (self.total - self.n))) / 2
        return self.base * max(0.0, self.cmr + (1 - self.cmr) * c)


def run(s, updates):
    lrs, moms = [], []
    for _ in range(updates):
        lrs.append(s.written[0])  # this update runs with what is written now
        moms.append(s.written[1])
        s.step()  # a successful update is followed by scheduler.step()
    return lrs, moms


def emit(name, values):
    body = ", ".join(f"{v:.17g}" for v in values)
    print(f"const std::vector<double> {name} = {{{body}}};")


CASES = [
    ("kRangeTest", RangeTest(1e-3, 3, 0.5, False), 10),
    ("kRangeTestStair", RangeTest(1e-3, 3, 0.5, True), 10),
    ("kOneCycle", OneCycle(1e-4, 1e-3, 4, 6, 0.5, 2, 0.85, 0.95, 0.1), 16),
    ("kOneCycleNoDecay", OneCycle(1e-4, 1e-3, 3, 3, 0.5, 0, 0.8, 0.9, 0.0), 10),
    ("kWarmupLog", Warmup(1e-5, 1e-3, 5, "log"), 8),
    ("kWarmupLinear", Warmup(1e-5, 1e-3, 5, "linear"), 8),
    ("kWarmupDecayLinear", Warmup(0.0, 3e-3, 4, "linear", total=10), 14),
    ("kWarmupDecayLog", Warmup(1e-4, 3e-3, 4, "log", total=10), 14),
    ("kCosineLog", Cosine(2e-3, 12, 4, 0.1, 0.05, "log"), 16),
    ("kCosineLinear", Cosine(2e-3, 12, 4, 0.0, 1e-4, "linear"), 16),
]

if __name__ == "__main__":
    print("// Generated by tools/golden/lr_schedules.py; do not edit by hand.")
    for name, sched, n in CASES:
        lrs, moms = run(sched, n)
        emit(name + "Lr", lrs)
        if isinstance(sched, OneCycle):
            emit(name + "Beta1", moms)
