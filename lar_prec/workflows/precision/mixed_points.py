"""The records of ``lar-prec mixed`` (:mod:`lar_prec.workflows.precision.mixed`): each verification as a
point of the trade-off curve (output error against the share of MACs and of float operators
left in float16, and top-1/top-5 agreement for a classifier's scores), the knee of that curve,
the operators kept in float32 and the whole analysis with its JSON (``lar-prec.mixed/1``);
each point's speed against float32 where it was timed
(:mod:`lar_prec.workflows.precision.mixed_speed`).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.compare.tolerance import OutputTolerance, fmt_num
from lar_prec.diagnosis.mixed import ComputeFraction
from lar_prec.lar.mixed_rewrite import MixedModel
from lar_prec.diagnosis.quantkeep import output_agreement
from lar_prec.records import json_number
from lar_prec.run.record import RunResult
from lar_prec.workflows.common.nondeterminism import Nondeterminism
from lar_prec.workflows.precision.mixed_speed import BASELINE, attempt_row
from lar_prec.workflows.sweep.local import OptionLocal
from lar_prec.workflows.sweep.speed import OptionSpeed, SweepSpeed

SCHEMA = "lar-prec.mixed/1"
#: an output is a classifier's scores when each sample has a vector of at least this many
MIN_CLASSES = 10
#: "most of the float16 MACs" lost: less than this share left in float16
MOST_LOST = 0.5


@dataclass(frozen=True)
class Agreement:
    """A classifier output against the reference: of ``samples``, how many have the reference's
    best class as their best (``top1``) and among their five best (``top5``)."""

    name: str
    samples: int
    classes: int
    top1: int
    top5: int

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "samples": self.samples, "classes": self.classes, "top1": self.top1,
                "top5": self.top5}


def classifier_agreement(name: str, ref: Any, got: Any) -> Optional[Agreement]:
    """Top-1/top-5 agreement of output ``name`` when it is a classifier's scores (one vector of
    at least MIN_CLASSES per sample, the first axis the samples); None otherwise."""
    a, b = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if a.ndim < 2 or a.shape != b.shape:
        return None
    a, b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    if a.shape[1] < MIN_CLASSES or sorted(d for d in np.asarray(ref).shape[1:] if d != 1) != [a.shape[1]]:
        return None
    o = output_agreement(a, b, name, name)
    if o.top1 is None or o.top5 is None:
        return None
    return Agreement(name, o.samples, o.classes, round(o.top1 * o.samples), round(o.top5 * o.samples))


@dataclass(frozen=True)
class Point:
    """One model tried, as a point of the trade-off: its output error (worst output; each in
    ``outputs``), the share left in float16 and, for classifier outputs, their agreement."""

    label: str
    output_err: float
    outputs: Tuple[Tuple[str, float], ...]
    fraction: ComputeFraction
    agreement: Tuple[Agreement, ...] = ()

    def to_json(self) -> Dict[str, Any]:
        return {"label": self.label, "output_err": json_number(self.output_err),
                "nonfinite": not math.isfinite(self.output_err),
                "outputs": [{"name": n, "err": json_number(e)} for n, e in self.outputs],
                "macs_fraction": self.fraction.macs, "oprs_fraction": self.fraction.oprs,
                "oprs_float16": self.fraction.oprs_float16, "oprs_total": self.fraction.oprs_total,
                "agreement": [a.to_json() for a in self.agreement]}


@dataclass(frozen=True)
class Attempt:
    """One verification: the keep-list (``kind``: ``kernel bugs``, ``local roots``, ``widened``,
    ``every operator``, ``nothing kept``), the mixed model and its point."""

    step: int
    kind: str
    keep: Tuple[str, ...]
    model: str
    point: Point
    within: bool
    run_dir: str
    seconds: float

    @property
    def output_err(self) -> float:
        return self.point.output_err

    def to_json(self) -> Dict[str, Any]:
        return {"step": self.step, "kind": self.kind, "keep": list(self.keep), "model": self.model,
                **self.point.to_json(), "within": self.within, "run_dir": self.run_dir,
                "seconds": round(self.seconds, 3)}


def knee(points: Sequence[Point]) -> Optional[int]:
    """The index of the curve's knee: the point after which error stops improving much per MAC
    kept in float32. Each point's share of the error removed (from the first point's to the
    last's) minus its share of the float16 MACs given up: the knee has the largest, so every
    later step buys less error per MAC than the curve's average. None for fewer than 2 points
    with finite errors and known MAC shares."""
    pts = [(k, p) for k, p in enumerate(points) if math.isfinite(p.output_err) and p.fraction.macs is not None]
    if len(pts) < 2:
        return None
    e0, m0 = pts[0][1].output_err, pts[0][1].fraction.macs
    e1, m1 = pts[-1][1].output_err, pts[-1][1].fraction.macs
    de, dm = e0 - e1, m0 - m1  # type: ignore[operator]

    def score(p: Point) -> float:
        gain = (e0 - p.output_err) / de if de > 0 else 0.0
        lost = (m0 - p.fraction.macs) / dm if dm > 0 else 0.0  # type: ignore[operator]
        return gain - lost

    return max(pts, key=lambda kp: (score(kp[1]), -kp[0]))[0]


@dataclass(frozen=True)
class KeptOperator:
    """One operator kept in float32: why it was listed (a kernel bug, a local root with its
    margin, or widened at which verification) and why it errs in float16 (the oracle's verdict)."""

    name: str
    opr_type: str
    listed: str
    local_err: Optional[float]
    floor: Optional[float]
    cause: Optional[str] = None
    cause_detail: Optional[Dict[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "opr_type": self.opr_type, "listed": self.listed,
                "local_err": json_number(self.local_err) if self.local_err is not None else None,
                "floor": self.floor, "cause": self.cause, "cause_detail": self.cause_detail}


@dataclass(frozen=True)
class MixedAnalysis:
    """Everything ``lar-prec mixed`` found (see :mod:`lar_prec.workflows.precision.mixed`)."""

    analysis_dir: Path
    model: Path
    option: str
    output_tolerance: OutputTolerance
    plain: Point
    level: Optional[Point]
    proposal: Tuple[str, ...]
    kernel_bugs: Tuple[str, ...]
    kept: Tuple[KeptOperator, ...]
    attempts: Tuple[Attempt, ...]
    verified: bool
    mixed_model: Optional[MixedModel]
    fraction: ComputeFraction
    local: OptionLocal
    runs: Tuple[RunResult, ...]
    keep_file: Path
    seconds: float
    note: str = ""
    #: why the plain option's run failed ("" when it ran)
    plain_failed: str = ""
    #: why correct float16's level was not measured ("" when it was)
    level_failed: str = ""
    #: every measured operator in execution order: (name, type, local error, float16 floor)
    operators: Tuple[Tuple[str, str, Optional[float], Optional[float]], ...] = ()
    #: the option alone made once more where it is out of tolerance: the same bits or not
    nondeterminism: Optional[Nondeterminism] = None
    #: ``{"inputs": [...], "input_summary": {...}}`` (seeded random, constant, not given inputs)
    inputs: Optional[Dict[str, Any]] = None
    #: the timed runs of float32, the option alone and each verification (None or ``off``: not timed)
    speed: Optional[SweepSpeed] = None

    def speed_of(self, name: str) -> Optional[OptionSpeed]:
        """A point's timing by its row name (``float32``, the option, ``mixed-<step>``); None: not timed."""
        sp = self.speed
        if sp is None or sp.off is not None:
            return None
        return sp.default if name == BASELINE else sp.of(name)

    def speed_words(self) -> Optional[str]:
        """The advice's speed line: each timed point against float32 (None when not timed)."""
        base = self.speed_of(BASELINE)
        if base is None:
            return None
        sp = self.speed
        how = f"{sp.rounds} interleaved rounds of --warmup-iter {sp.warmup_iter} --iter {sp.iters}"  # type: ignore[union-attr]
        if base.status != "timed":
            return f"speed not compared ({how}): float32's {base.words()}"
        rows = ([] if self.plain_failed else [("the option alone", self.speed_of(self.option))]) + [
            (f"verification {a.step}", self.speed_of(attempt_row(a.step))) for a in self.attempts]
        said = "; ".join(f"{who}: {o.words()}" for who, o in rows if o is not None)
        return (f"speed against the float32 model ({base.words()}, {how}): {said}" if said else
                f"speed: the float32 model {base.words()} ({how})")

    @property
    def tolerance(self) -> float:
        return self.output_tolerance.value

    @property
    def plain_err(self) -> float:
        return self.plain.output_err

    @property
    def output_err(self) -> float:
        """The output error of the last model tried (the option alone when none was)."""
        return self.attempts[-1].output_err if self.attempts else self.plain_err

    @property
    def needs_float32(self) -> bool:
        """The option alone is out of tolerance (exit 1)."""
        return not self.output_tolerance.holds(self.plain_err)

    def curve(self) -> List[Point]:
        """The trade-off from the kernel bugs fixed (or the option alone when it has none) on."""
        tried = [a.point for a in self.attempts]
        if self.attempts and self.attempts[0].kind == "kernel bugs":
            return tried
        return ([] if self.plain_failed else [self.plain]) + tried

    def knee(self) -> Optional[Point]:
        """The knee, when the tolerance cannot be met without losing most of the float16 MACs."""
        last = self.attempts[-1] if self.attempts else None
        if last is None or (self.verified and (last.point.fraction.macs is None or
                                               last.point.fraction.macs >= MOST_LOST)):
            return None
        pts = self.curve()
        k = knee(pts)
        return None if k is None else pts[k]

    def outcome(self) -> str:
        """The line the analysis comes to: the last model tried and whether it holds (the option
        alone's line when no keep-list was tried). The page's headline."""
        last = self.attempts[-1] if self.attempts else None
        if last is None:
            return self.advice()[0]
        lead = ("nothing needs float32 (the option alone is within); with its local roots in float32 too"
                if not self.needs_float32 else "verified" if self.verified else "best tried")
        return (f"{lead}: {len(self.kept)} operator(s) in float32, {self.output_tolerance.words(last.output_err)}, "
                f"{_pct(last.point.fraction.macs)} of MACs left in float16")

    def advice(self) -> List[str]:
        """What to do, in the words the terminal and the page print."""
        tol, opt = self.output_tolerance, f"--enable-{self.option}"
        lines = []
        if self.plain_failed:
            lines.append(f"{opt} alone does not run here ({self.plain_failed})")
        else:
            lines.append(f"{opt} alone: {tol.words(self.plain_err)}: "
                         f"{'within' if tol.holds(self.plain_err) else 'out of tolerance'}")
        if self.nondeterminism is not None:
            lines.append(self.nondeterminism.words(opt))
        if self.level is not None:
            lines.append(f"correct float16 (the naive kernels under {opt}) reaches output error "
                         f"{fmt_num(self.level.output_err)}: the level the tolerance is relative to")
        elif self.level_failed:
            lines.append(f"correct float16's level not measured: {self.level_failed}")
        if self.kernel_bugs:
            first = next((a for a in self.attempts if a.kind == "kernel bugs"), None)
            then = (f"; with {'it' if len(self.kernel_bugs) == 1 else 'them'} in float32: "
                    f"{tol.words(first.output_err)}" + (", float16's own level" if first.within else "")) if first else ""
            lines.append(f"kernel bug{'s' if len(self.kernel_bugs) > 1 else ''} (the default kernel wrong, by the "
                         f"float64 oracle): {', '.join(self.kernel_bugs)}: fix in MegEngine, or keep in float32{then}")
        last = self.attempts[-1] if self.attempts else None
        if last is not None and not self.verified and last.kind == "every operator":
            lines.append(f"no keep-list tried brings it within: with every operator in float32, "
                         f"{tol.words(last.output_err)}: the default kernels differ from the naive ones in float32 too")
        if last is not None:
            lines.append(self.outcome())
        k = self.knee()
        if k is not None:
            lines.append(f"the tolerance {fmt_num(tol.value)} cannot be met without losing most of the float16 MACs; "
                         f"the knee: {k.label}, output error {fmt_num(k.output_err)} with {_pct(k.fraction.macs)} of "
                         "MACs in float16 (keeping more buys less error per MAC from there)")
        speed = self.speed_words()
        if speed:
            lines.append(speed)
        return lines

    def _speed_json(self, name: str) -> Optional[Dict[str, Any]]:
        o = self.speed_of(name)
        return None if o is None else o.to_json()

    def _timing_json(self) -> Dict[str, Any]:
        """``speed`` (top level): how the points were timed, the float32 baseline's timing."""
        sp = self.speed
        if sp is None or sp.off is not None:
            return {"off": "not timed"} if sp is None else sp.to_json()
        return {**sp.to_json(), "baseline": BASELINE,
                "float32": None if sp.default is None else sp.default.to_json(),
                "rows": {BASELINE: "the plain model, no option",
                         **({} if self.plain_failed else {self.option: f"--enable-{self.option} alone"}),
                         **{attempt_row(a.step): a.model for a in self.attempts}}}

    def to_json(self) -> Dict[str, Any]:
        kept = {k.name for k in self.kept}
        knee_pt = self.knee()
        speed_row = {self.plain.label: self.option, **{a.point.label: attempt_row(a.step) for a in self.attempts}}
        return {
            "schema": SCHEMA,
            "analysis_dir": str(self.analysis_dir),
            "model": str(self.model),
            "option": self.option,
            "tolerance": self.tolerance,
            "output_tolerance": self.output_tolerance.to_json(),
            "verdict": ("within" if not self.needs_float32 else "fixed" if self.verified else "not_fixed"),
            "plain": {**self.plain.to_json(), "nonfinite": not math.isfinite(self.plain_err) and not self.plain_failed,
                      "failed": self.plain_failed or None, "chosen": not self.attempts,
                      "speed": self._speed_json(self.option)},
            "level": None if self.level is None else self.level.to_json(),
            "level_failed": self.level_failed or None,
            "proposal": list(self.proposal),
            "kernel_bugs": list(self.kernel_bugs),
            "kept": [k.to_json() for k in self.kept],
            "keep_types": dict(Counter(k.opr_type for k in self.kept)),
            "verified": self.verified,
            "output_err": json_number(self.output_err),
            "mixed_model": self.mixed_model.to_json() if self.mixed_model is not None else None,
            "keep_file": str(self.keep_file),
            "fp16_fraction": self.fraction.to_json(),
            # the keep-list written as the mixed model is the last one tried (the empty list: the option alone)
            "attempts": [{**a.to_json(), "chosen": k == len(self.attempts) - 1,
                          "speed": self._speed_json(attempt_row(a.step))} for k, a in enumerate(self.attempts)],
            "headline": self.outcome(),
            "curve": [{**p.to_json(), "speed": self._speed_json(speed_row.get(p.label, ""))} for p in self.curve()],
            "knee": None if knee_pt is None else knee_pt.to_json(),
            "advice": self.advice(),
            "operators": [{"name": n, "opr_type": t, "local_err": json_number(e) if e is not None else None,
                           "nonfinite": e is not None and not math.isfinite(e), "floor": f,
                           "float32": n in kept} for n, t, e, f in self.operators],
            "local": self.local.to_json(),
            "runs": [r.to_json() for r in self.runs],
            "seconds": round(self.seconds, 3),
            "note": self.note or None,
            "nondeterminism": None if self.nondeterminism is None else {
                **self.nondeterminism.to_json(), "words": self.nondeterminism.words(f"--enable-{self.option}")},
            "speed": self._timing_json(),
            **(self.inputs or {}),
        }


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
