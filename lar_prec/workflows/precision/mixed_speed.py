"""The speed of ``lar-prec mixed``'s points (issue 55): what each keep-list buys in time.

Once the verifications are known, the plain model in float32 (no option: the baseline), the
option alone (the all-float16 run, when it runs) and the model of every verification are
timed as the sweep times its options (:func:`lar_prec.workflows.sweep.speed.measure_speed`):
load_and_run's own ``--warmup-iter 1 --iter 10`` without any dump, one fresh process at a
time, interleaved rounds (float32, the option alone, mixed-1, mixed-2, ..., then again). Each
point gets its speed-up against float32 with its interval, or "no measurable difference"
where the spreads overlap, or how its timing failed; a point whose timing fails keeps its
precision verdict (the timing decides nothing about precision). The timing keeps to the
sweep's budget (:data:`lar_prec.workflows.sweep.speed.DEFAULT_SPEED_BUDGET` of mixed's wall
time until then): a float16 row slower than its allowance is stopped with the iterations it
printed, or not timed (``over_budget``) when it printed none (float16 on x86 runs emulated).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

from lar_prec.run.settings import Prepared
from lar_prec.workflows.sweep.speed import SweepSpeed, measure_speed, off

#: the name of the baseline row in the timing (the plain model, no option)
BASELINE = "float32"


def attempt_row(step: int) -> str:
    """The timing's name of verification ``step`` (its model is ``mixed-<step>.mge``)."""
    return f"mixed-{step}"


def time_points(ready: Prepared, option: str, plain_runs: bool, attempts: Sequence[Any], rounds: int,
                say: Callable[[str], None], budget: Optional[float] = None) -> SweepSpeed:
    """Time float32, the option alone (when ``plain_runs``) and each of ``attempts`` (their
    ``step`` and ``model``), ``rounds`` interleaved rounds in ``ready.dir/speed``; off at 0.
    ``budget``: seconds the timed runs other than float32's may take (None: no limit)."""
    if rounds == 0:
        return off("--speed-runs 0: not timed")
    rows: List[Tuple[Any, ...]] = ([(option, (f"--enable-{option}",))] if plain_runs else []) + [
        (attempt_row(a.step), (), a.model) for a in attempts]
    per_round = 1 + len(rows)
    say(f"timing: {rounds} interleaved rounds of float32, " + ("the option alone" if plain_runs else "")
        + (", " if plain_runs and attempts else "") + (f"{len(attempts)} keep-list(s)" if attempts else "")
        + " (no dumps, one process at a time)")

    def progress(_kind: str, done: int, total: int, **_: Any) -> None:
        if done % per_round == 0:
            say(f"timed round {done // per_round} of {rounds}")

    s = ready.settings
    return measure_speed(ready.model, ready.inputs, ready.dir, ready.lar, s.timeout, (), rows, rounds, progress,
                         ready.mode, budget=budget)

