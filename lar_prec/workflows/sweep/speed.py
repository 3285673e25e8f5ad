"""What each option costs in time: timed runs without any dump, beside its precision verdict.

After a sweep's precision runs, the plain default run and every option that loaded are run
again with load_and_run's own ``--warmup-iter W --iter N`` and no dump, one process at a time
(never beside another run: two cores shared would time each other), **interleaved** in
rounds (default, A, B, ..., then the same runs again, each later round in a seeded shuffled
order: :func:`round_order`), each run a fresh process, so a change of the
machine's load hits every option alike; each executes in the calling thread (:data:`INPLACE`),
so no option is timed with a worker thread's wake-up and another without. Each run's
per-iteration times are read from its stderr, the lines load_and_run prints (``iter 3/10:
e2e=12.345 ms (host=...)``: MegEngine's ``strategy_normal.cpp`` and the bundled runner print
the same).

Per option (:func:`compare_speed`), with only what was measured:

* its time: the median of every timed iteration, and its spread: from the lowest lower
  quartile of a round's iterations to the highest upper quartile (what varies from one
  iteration to the next and from one fresh process to the next);
* its speed-up against the default run: the median over rounds of the round's ratio
  (default's median / the option's median, in the same round), with its interval the lowest
  and highest of those ratios;
* **no measurable difference** when the option's spread and the default's overlap (then no
  number is given as a difference); a spread needs two rounds, so ``--speed-runs`` is 0 (off)
  or at least 2.

An option that loads but fails in a timed run is reported as such (``crashed``, ``hung``,
...) and keeps its precision verdict. The thread count (``--multithread``) and device are
the same for every option by construction (the sweep's flags); they are recorded.

**The timing budget** (``--speed-budget``, default :data:`DEFAULT_SPEED_BUDGET` of the sweep's
wall time before timing): the default run is always timed in full; before each option's timed
run, what is left of the budget (after the runs made and the default's runs to come, at the
default's measured time) is shared equally among the options' runs still to come: that run's
*allowance*, never less than :data:`ALLOWANCE_FLOOR` times the default's own timed run (an
option as fast as the default finishes even when the machine slows down meanwhile). A run
still going at its allowance is stopped and its iterations printed so far count (a slow option
gets fewer iterations, not a wrong time); one that printed no timed iteration by then is
``over_budget`` (its load and warm-up alone take longer: on x86, float16 options run emulated,
seconds per iteration) and is not timed again, leaving its share to the others. Options are timed
in the order given; nothing is estimated, every time is measured.
"""
from __future__ import annotations

import random
import re
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from lar_prec.errors import LarPrecError, RunError, UsageError
from lar_prec.run.once import run_once
from lar_prec.run.record import RunResult

#: rounds of timed runs unless told (``--speed-runs``)
DEFAULT_SPEED_RUNS = 3
#: the most rounds ``--speed-runs`` takes
MAX_SPEED_RUNS = 50
#: the timing's budget unless told (``--speed-budget``): this fraction of the sweep's wall time
#: before timing (the issue's cost target: timing adds at most 15% to a sweep)
DEFAULT_SPEED_BUDGET = 0.15
#: an option's allowance is at least this many times the default's first timed run (s): a
#: process as fast as the default is never stopped by a change of the machine's load
ALLOWANCE_FLOOR = 2.0
#: the largest ``--speed-budget`` (100 sweeps' worth of timing)
MAX_SPEED_BUDGET = 100.0
#: load_and_run's ``--warmup-iter`` and ``--iter`` of a timed run: the first execution picks
#: algorithms and allocates (seconds on ResNet-18), so it is never timed
WARMUP_ITER = 1
ITERS = 10

#: every timed run executes in the calling thread (CPU inplace mode, load_and_run's
#: ``--cpu-default``): on the default CPU device an execution's wait includes waking the comp
#: node's worker thread, on a busy machine the scheduler's latency (ms, not the model's), which
#: ``--record-comp-seq`` (it replays its kernels in the calling thread) never pays: it looked
#: 100x faster on every small model. Left out where the flags pick the device themselves.
INPLACE = ("--cpu-default",)
_DEVICE_FLAGS = frozenset({"cpu-default", "multithread", "multithread-default", "cuda"})

#: load_and_run's per-iteration line (MegEngine's strategy_normal.cpp, and the bundled runner)
ITER_LINE = re.compile(r"\biter (\d+)/(\d+): e2e=([0-9.]+(?:[eE][-+]?\d+)?) ?ms")


def check_speed_runs(n: Any) -> int:
    """``--speed-runs``: 0 (off) or 2 to :data:`MAX_SPEED_RUNS` (UsageError otherwise)."""
    if isinstance(n, bool) or not isinstance(n, int) or not (n == 0 or 2 <= n <= MAX_SPEED_RUNS):
        raise UsageError(f"--speed-runs {n!r}: expected 0 (no timing) or 2 to {MAX_SPEED_RUNS} rounds "
                         "(a spread needs two rounds)")
    return n


def check_speed_budget(x: Any) -> Optional[float]:
    """``--speed-budget``: a fraction of the sweep's wall time (0 < F <= :data:`MAX_SPEED_BUDGET`),
    or ``none`` (None: no budget, every timed run goes to its end or the timeout)."""
    if x is None or (isinstance(x, str) and x.strip().lower() in ("none", "off", "unlimited")):
        return None
    try:
        f = float(x) if not isinstance(x, bool) else float("nan")
    except (TypeError, ValueError):
        f = float("nan")
    if not (0 < f <= MAX_SPEED_BUDGET):  # NaN fails too
        raise UsageError(f"--speed-budget {x!r}: expected a fraction of the sweep's wall time above 0 and at most "
                         f"{MAX_SPEED_BUDGET:g} (0.15: timing adds at most 15%), or 'none' for no budget")
    return f


def iteration_ms(stderr: str) -> Tuple[float, ...]:
    """The per-iteration times (ms) load_and_run printed, in order (warm-ups are not among them)."""
    return tuple(float(m.group(3)) for m in ITER_LINE.finditer(stderr))


def threads_of(flags: Sequence[str]) -> int:
    """The worker threads a run gets from its flags (``--multithread[-default] N``; 1 without)."""
    n = 1
    for i, a in enumerate(flags):
        name, eq, value = a.lstrip("-").replace("_", "-").partition("=")
        if name in ("multithread", "multithread-default"):
            value = value if eq else (flags[i + 1] if i + 1 < len(flags) else "")
            try:
                n = int(value)
            except ValueError:
                pass
    return n


def inplace_flags(flags: Sequence[str]) -> Tuple[str, ...]:
    """:data:`INPLACE`, or () where ``flags`` pick the device or its threads themselves."""
    names = {a.lstrip("-").replace("_", "-").partition("=")[0] for a in flags if a.startswith("-")}
    return () if names & _DEVICE_FLAGS else INPLACE


@dataclass(frozen=True)
class OptionSpeed:
    """One option's timed runs (or the default run's: ``option`` ``default``).

    ``status``: ``timed``, or how a timed run failed (``crashed``, ``hung``, ``stalled``,
    ``failed``, ``no_times``: it printed no per-iteration line; ``over_budget``: no timed
    iteration within its share of the timing budget). ``rounds``: per round, the
    iterations' times (ms). ``speedup``: default / option (the median of the per-round ratios,
    ``low``-``high`` their range; None for the default, or when not measured); ``measurable``:
    its spread and the default's do not overlap."""

    option: str
    status: str
    rounds: Tuple[Tuple[float, ...], ...] = ()
    reason: str = ""
    run_dirs: Tuple[str, ...] = ()
    speedup: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    measurable: bool = False

    @property
    def round_ms(self) -> Tuple[float, ...]:
        """Each round's median time per iteration (ms)."""
        return tuple(statistics.median(r) for r in self.rounds if r)

    @property
    def median_ms(self) -> Optional[float]:
        times = [t for r in self.rounds for t in r]
        return statistics.median(times) if times else None

    @property
    def spread_ms(self) -> Optional[Tuple[float, float]]:
        """From the lowest round's lower quartile to the highest round's upper quartile (ms)."""
        qs = [_quartiles(r) for r in self.rounds if r]
        return (min(q[0] for q in qs), max(q[1] for q in qs)) if qs else None

    def words(self) -> str:
        """``1.8x faster``, ``1.3x slower``, ``no measurable difference`` or what failed."""
        if self.status == "over_budget":
            return f"not timed (timing budget): {self.reason}" if self.reason else "not timed (timing budget)"
        if self.status != "timed":
            return f"timing {self.status.replace('_', ' ')}" + (f": {self.reason}" if self.reason else "")
        if self.speedup is None:  # the default run, or no spread to compare with
            m = self.median_ms
            return "" if m is None else f"{m:.3g} ms per iteration"
        if not self.measurable:
            return "no measurable difference"
        return f"{_x(self.speedup)} faster" if self.speedup > 1 else f"{_x(1 / self.speedup)} slower"

    def to_json(self) -> Dict[str, Any]:
        spread = self.spread_ms
        return {"status": self.status, "reason": self.reason or None,
                "median_ms": _r(self.median_ms), "round_ms": [_r(x) for x in self.round_ms],
                "spread_ms": None if spread is None else [_r(spread[0]), _r(spread[1])],
                "iterations_ms": [list(r) for r in self.rounds],
                "speedup": _r(self.speedup), "speedup_interval": None if self.low is None else [_r(self.low), _r(self.high)],
                "measurable": self.measurable, "words": self.words(), "run_dirs": list(self.run_dirs)}


def _quartiles(times: Sequence[float]) -> Tuple[float, float]:
    """The lower and upper quartile of one round's iteration times."""
    if len(times) < 2:
        return times[0], times[0]
    q = statistics.quantiles(times, n=4, method="inclusive")
    return q[0], q[2]


def _x(v: float) -> str:
    return f"{v:.2f}x" if v < 1.995 else f"{v:.1f}x"


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 4)


def compare_speed(default: OptionSpeed, option: OptionSpeed) -> OptionSpeed:
    """``option`` with its speed-up against ``default``: per round k, ratio default_k / option_k
    (the two ran in the same round, back to back); the speed-up is their median, its interval
    their lowest and highest; measurable only when the two spreads (:attr:`OptionSpeed.spread_ms`)
    do not overlap. Rounds where either has no time are left out."""
    if option.status != "timed" or default.status != "timed":
        return option
    pairs = [(statistics.median(d), statistics.median(o)) for d, o in zip(default.rounds, option.rounds) if d and o]
    if len(pairs) < 2:
        return replace(option, reason="fewer than two rounds timed: no spread")
    ratios = [d / o for d, o in pairs]
    (dl, dh), (ol, oh) = default.spread_ms, option.spread_ms  # type: ignore[misc]
    apart = oh < dl or ol > dh
    return replace(option, speedup=statistics.median(ratios), low=min(ratios), high=max(ratios), measurable=apart)


@dataclass(frozen=True)
class SweepSpeed:
    """The timing of a sweep: how it was timed and each option's :class:`OptionSpeed`
    (``default`` the default run's; ``options`` by name)."""

    rounds: int
    warmup_iter: int
    iters: int
    threads: int
    device: str
    seconds: float
    default: Optional[OptionSpeed]
    options: Tuple[Tuple[str, OptionSpeed], ...]
    #: why nothing was timed (None: it was)
    off: Optional[str] = None
    #: the timing budget (s; None: none) and the smallest allowance an option's timed run got
    budget: Optional[float] = None
    allowance: Optional[float] = None
    #: the budget as asked (a fraction of the sweep's wall time before timing)
    budget_fraction: Optional[float] = None

    def of(self, name: str) -> Optional[OptionSpeed]:
        return dict(self.options).get(name)

    def to_json(self) -> Dict[str, Any]:
        return {"rounds": self.rounds, "warmup_iter": self.warmup_iter, "iter": self.iters, "threads": self.threads,
                "device": self.device, "seconds": round(self.seconds, 3), "off": self.off,
                "budget_fraction": self.budget_fraction, "budget_seconds": _r(self.budget),
                "allowance_seconds": _r(self.allowance),
                "how": ("timed runs without any dump, one at a time, interleaved (default, each option, then again, "
                        "each later round in a seeded shuffled order) "
                        "in fresh processes, in the calling thread (--cpu-default) unless the flags pick the "
                        "device; per option the median time per iteration, its spread from the lowest "
                        "lower quartile of a round's iterations to the highest upper quartile; speed-up = median over "
                        "rounds of default/option in the same round, interval their lowest and highest; no measurable "
                        "difference when the two spreads overlap; each option's run stopped at its allowance (the "
                        "timing budget left, shared equally among the option runs to come, at least twice the "
                        "default's own timed run) keeps the iterations it printed")}


def front(points: Sequence[Tuple[str, float, float]]) -> Tuple[str, ...]:
    """The options no other beats on both counts: of (name, speed-up, output error) points,
    those for which no other point is at least as fast and as precise and better on one."""
    return tuple(n for n, s, e in points
                 if not any(s2 >= s and e2 <= e and (s2 > s or e2 < e) for _, s2, e2 in points))


def off(why: str, rounds: int = 0) -> SweepSpeed:
    """A sweep whose options were not timed, and why."""
    return SweepSpeed(rounds, WARMUP_ITER, ITERS, 1, "", 0.0, None, (), off=why)


_FAILED = {"timeout": "hung", "stalled": "stalled", "crashed": "crashed"}


def _timed_run(run: Callable[..., RunResult], name: str, flags: Tuple[str, ...], k: int,
               allowance: Optional[float] = None) -> Tuple[str, Tuple[float, ...], str, str, float]:
    """(status, iteration times, reason, run folder, wall seconds) of one timed run; with an
    ``allowance`` (s) the run is stopped there and the iterations it printed count."""
    try:
        rec = run(flags, f"{name}-{k + 1}", allowance)
    except (RunError, UsageError) as exc:
        found: Optional[RunResult] = exc.result if isinstance(exc, LarPrecError) else None
        if found is None:
            raise
        if allowance is not None and found.status == "timeout":
            # stopped at its share of the budget: what it printed so far is its measurement
            times = iteration_ms(_stderr(found.dir))
            if times:
                return "timed", times, "", str(found.dir), found.seconds
            return ("over_budget", (), f"no timed iteration within its allowance of {allowance:.3g} s (its load and "
                    "warm-up take longer; --speed-budget raises the budget)", str(found.dir), found.seconds)
        msg = re.sub(r" in run '[^']*' \([^)]*\)|; run '[^']*' \([^)]*\)", "", str(exc).split(" -- hint:")[0])
        return _FAILED.get(found.status, "failed"), (), msg, str(found.dir), found.seconds
    text = _stderr(rec.dir)
    if text is None:
        return "no_times", (), "cannot read its stderr", str(rec.dir), rec.seconds
    times = iteration_ms(text)
    if not times:
        return ("no_times", (), "load_and_run printed no per-iteration time ('iter k/N: e2e=X ms')", str(rec.dir),
                rec.seconds)
    return "timed", times, "", str(rec.dir), rec.seconds


def _stderr(run_dir: Path) -> Optional[str]:
    """A timed run's stderr (None when it cannot be read)."""
    try:
        return (run_dir / "stderr.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def allowance_of(budget: Optional[float], spent: float, default_seconds: float, default_runs_left: int,
                 option_runs_left: int, timeout: Optional[float]) -> Optional[float]:
    """The next option's timed run's allowance (s): what is left of ``budget`` after ``spent``
    and the default's runs still to come (``default_seconds`` each, measured), shared equally
    among the options' runs still to come; at least :data:`ALLOWANCE_FLOOR` times the default's
    own run (what an option stopped early leaves goes to the others). None without a budget;
    never above ``timeout``."""
    if budget is None:
        return None
    share = max(ALLOWANCE_FLOOR * default_seconds,
                (budget - spent - default_runs_left * default_seconds) / max(1, option_runs_left))
    return share if timeout is None else min(timeout, share)


def round_order(rows: Sequence[Tuple[Any, ...]], k: int) -> List[Tuple[Any, ...]]:
    """Round ``k``'s order of ``rows`` (the default first): round 0 as given, with the default
    first (its time sets the options' allowances); every later round shuffled, the default too,
    with the round's number as the seed (the same sweep, the same orders), so no option always
    runs right after the default or right after the sweep's own runs: a position's effect on a
    fresh process (the caches, the CPU's clock after the one before) lands in the rounds' spread
    instead of in every round's ratio alike."""
    if k == 0:
        return list(rows)
    order = list(rows)
    random.Random(k).shuffle(order)
    return order


def measure_speed(model: Path, inputs: Any, adir: Path, lar: Any, timeout: Optional[float], extra_flags: Sequence[str],
                  options: Sequence[Tuple[Any, ...]], rounds: int,
                  progress: Optional[Callable[..., None]] = None, mode: Optional[str] = None,
                  budget: Optional[float] = None) -> SweepSpeed:
    """Time the default run and each of ``options`` (name, flags), ``rounds`` interleaved
    rounds, one fresh process at a time, in ``adir/speed``; a failed option is not timed again.
    An option may be (name, flags, model): that row runs its own model (a rewritten one, e.g.
    a mixed keep-list's), on the same inputs. ``budget``: seconds the options' timed runs may
    take in all (see the module's text)."""
    t0 = time.monotonic()
    rows: List[Tuple[str, Tuple[str, ...], Optional[Path]]] = [("default", (), None)] + [
        (o[0], tuple(o[1]), Path(o[2]) if len(o) > 2 and o[2] is not None else None) for o in options]
    got: Dict[str, OptionSpeed] = {n: OptionSpeed(n, "timed") for n, _, _ in rows}
    env: Dict[str, Any] = {}
    allowance: Optional[float] = None
    inplace = inplace_flags(extra_flags)

    def run(flags: Tuple[str, ...], label: str, limit: Optional[float], path: Optional[Path] = None) -> RunResult:
        rec = run_once(model if path is None else path, inputs, "default", adir / "speed", lar=lar,
                       timeout=timeout if limit is None else limit, extra_flags=tuple(extra_flags) + inplace + flags,
                       label=label, timed=(WARMUP_ITER, ITERS), model_mode=mode if path is None else None)
        env.update(rec.environment)
        return rec

    total, done = rounds * len(rows), 0
    spent, first_default = 0.0, None  # the timed runs' seconds so far; the default's first run's
    for k in range(rounds):
        order = round_order(rows, k)
        pos = {n: i for i, (n, _, _) in enumerate(order)}
        for name, flags, path in order:
            s = got[name]
            if s.status == "timed":
                limit = None
                if name != "default" and first_default is not None and budget is not None:
                    # option runs still to come, this one included (an option stopped for good counts none)
                    left = sum(rounds - k - (pos[n2] < pos[name]) for n2, _, _ in rows
                               if n2 != "default" and got[n2].status == "timed")
                    limit = allowance_of(budget, spent, first_default, rounds - k - 1, left, timeout)
                    allowance = limit if allowance is None else min(allowance, limit)
                status, times, reason, where, secs = _timed_run(
                    lambda f, label, lim, p=path: run(f, label, lim, p), name, flags, k, limit)
                spent += secs
                if status == "over_budget" and first_default is not None:
                    reason += f"; the default's whole timed run took {first_default:.3g} s"
                got[name] = replace(s, status=status, rounds=s.rounds + ((times,) if times else ()), reason=reason,
                                    run_dirs=s.run_dirs + (where,))
                if name == "default" and k == 0 and status == "timed":
                    first_default = secs
            done += 1
            if progress:
                progress("speed", done, total, running=(f"{name} (timed, round {k + 1})",),
                         finished=f"{name} round {k + 1}: {got[name].status.replace('_', ' ')}")
    default = got.pop("default")
    opts = tuple((o[0], compare_speed(default, got[o[0]])) for o in options)
    device = "cuda" if any(a.lstrip("-") == "cuda" for a in extra_flags) else "cpu"
    cpu = env.get("cpu_model")
    return SweepSpeed(rounds, WARMUP_ITER, ITERS, threads_of(tuple(extra_flags)),
                      f"{device} ({cpu})" if cpu else device, time.monotonic() - t0, default, opts,
                      budget=budget, allowance=allowance)


def time_sweep(prep: Any, loaded: Sequence[Tuple[str, Tuple[str, ...]]], rounds: int, remote: Any = None,
               budget: Optional[float] = DEFAULT_SPEED_BUDGET, elapsed: float = 0.0) -> SweepSpeed:
    """The timing of a sweep's prepared analysis (:class:`lar_prec.run.settings.Prepared`) for
    the options that ``loaded`` (name, flags): off at 0 rounds, or where the runs are on a device.
    ``budget``: a fraction of ``elapsed`` (the sweep's wall time before timing, s); None: none."""
    if rounds == 0:
        return off("--speed-runs 0: not timed")
    if remote is not None:
        return off("not timed: the runs are on a device (timed runs are made on this machine only)", rounds)
    s = prep.settings
    sp = measure_speed(prep.model, prep.inputs, prep.dir, prep.lar, s.timeout, s.extra_flags, loaded, rounds,
                       s.progress, prep.mode, budget=None if budget is None else budget * elapsed)
    return replace(sp, budget_fraction=budget)
