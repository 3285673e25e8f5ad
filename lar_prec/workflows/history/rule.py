"""``lar-prec check``: an analysis judged against the store's history, per operator, and
against a committed baseline (the CI ratchet). The rule is docs/history.md's:

Each operator of the checked run is compared with its own past along the run's **series**
(same model, input, command, configuration and options, same kind of device; builds and time
vary), on two errors:

* its **local error** where local error was measured: the error the operator makes itself, on
  the reference's inputs, over its floor (``TERMS_C`` rounding units of its sums, the most a
  correct kernel errs: :mod:`lar_prec.diagnosis.floors`). An operator regresses when it goes
  over its floor where no past run was (a new local root), or, already over it in the past,
  when it rises more than one floor above its past worst;
* its **accumulated error** ``max_err``: walking the past in time order, a value joins the
  operator's band when it lies within the band so far (so a past regression never widens it),
  and the band is ``[lo - m, hi + m]``, ``lo``/``hi`` the smallest and largest accepted past
  errors and ``m = max(jitter, reach, spread, 2 ulps)``: ``jitter`` the band shake measured (the
  largest ``max_err`` over the shake runs of this model, input and device kind), ``reach`` the
  largest floor of the operator and of every operator upstream of it (a correct kernel upstream
  that fast-run swaps for another moves the error this one carries by up to its floor),
  ``spread = hi - lo`` (the run-to-run jitter the history shows), 2 ulps = 2^-22 for float32
  (2^-9 float16): ``max_err`` divides by ``max(|a|, |b|, 1)``, so a rounding tie moves it by
  less than that. It regresses above the band or when it turns NaN/Inf where its past was finite.

An operator **improves** when its accumulated error drops below its band, or its local error
back under its floor where every past run was over it. Among the regressed, the **root** is one
none of whose inputs (transitively) regressed: listed first.

An operator whose **own repeated runs differ** (runs of one build in the series, the checked run
with them, give other errors: :func:`spreads`) is **nondeterministic**: named with its spread,
and never a regression of itself (its error moves by that much with nothing changed); for a
build whose runs of it did not repeat yet, that spread joins its margin as a jitter band does.
Nothing is said regressed or improved before the series holds :data:`MIN_HISTORY` past runs
(a band of one run is a point: any rounding of another run leaves it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from lar_prec.errors import UsageError

#: 2 ulps of max_err's scale per dtype (see the module docstring)
TWO_ULPS = {"Float32": 2.0 ** -22, "Float16": 2.0 ** -9, "BFloat16": 2.0 ** -6}
#: past runs of a series before check says an operator regressed or improved (``--min-history``)
MIN_HISTORY = 3


@dataclass
class Band:
    """One operator's accepted past errors: the band so far and the last run within it
    (``last_good``: what :meth:`accept` was given, a check's ``(run_id, created)``)."""

    lo: float = math.inf
    hi: float = -math.inf
    n: int = 0
    last_good: Any = None
    algorithms: Set[str] = field(default_factory=set)
    finite: bool = True

    def margin(self, wide: float, ulps: float) -> float:
        """``wide``: the larger of the operator's jitter band and its reach (module docstring)."""
        spread = self.hi - self.lo if self.n else 0.0
        return max(wide, spread, ulps)

    def limits(self, wide: float, ulps: float) -> Tuple[float, float]:
        m = self.margin(wide, ulps)
        return self.lo - m, self.hi + m

    def judge(self, err: Optional[float], status: str, wide: float, ulps: float) -> str:
        """``regressed``, ``improved``, ``within`` or ``new`` (no past yet). Called for every past
        row of every operator: the arithmetic of :meth:`limits` inline."""
        if not self.n:
            return "new"
        if err is None:
            return "regressed" if status == "nonfinite" and self.finite else "within"
        m = max(wide, self.hi - self.lo, ulps)
        if err > self.hi + m:
            return "regressed"
        return "improved" if err < self.lo - m and self.lo - m > 0 else "within"

    def accept(self, err: Optional[float], status: str, run: Any, algorithm: Optional[str]) -> None:
        if err is None:
            if status == "nonfinite":
                self.finite = False
            return
        self.lo, self.hi, self.n = min(self.lo, err), max(self.hi, err), self.n + 1
        self.last_good = run
        if algorithm:
            self.algorithms.add(algorithm)


def over_floor(local_err: Optional[float], floor: Optional[float]) -> Optional[float]:
    """Local error in floors (> 1: over its floor, a local root), None where not measured."""
    if local_err is None or floor is None or not math.isfinite(local_err):
        return None
    if floor <= 0:
        return math.inf if local_err > 0 else 0.0  # exact operators: any difference is over
    return local_err / floor


def judge_local(past: Band, ratio: Optional[float]) -> str:
    """The local verdict of a ratio (:func:`over_floor`) against the accepted past ratios."""
    if ratio is None or not past.n:
        return "within"
    limit = 1.0 if past.hi <= 1.0 else past.hi + max(past.hi - past.lo, 1.0)
    if ratio > limit:
        return "regressed"
    return "improved" if past.lo > 1.0 and ratio <= 1.0 else "within"


@dataclass
class Past:
    """One operator's history: its accumulated error's band, its local error's (in floors)."""

    err: Band = field(default_factory=Band)
    local: Band = field(default_factory=Band)


def group_history(history: Iterable[Sequence[Any]]) -> Dict[str, List[Sequence[Any]]]:
    """A series' past rows (``Store.series_ops``: run_id, op_key, status, max_err, local_err,
    floor, algorithm, created; time order) by operator key."""
    out: Dict[str, List[Sequence[Any]]] = {}
    for row in history:
        out.setdefault(row[1], []).append(row)
    return out


def reach(ops: Sequence[Any], grouped: Mapping[str, List[Sequence[Any]]], jitter: Mapping[str, float]
          ) -> Dict[str, float]:
    """``wide`` of every operator of the checked run: the larger of its jitter band and its
    reach, the largest floor (past or now) of the operator and of every one upstream of it."""
    own = {o.op_key: max([o.floor or 0.0, *(r[5] or 0.0 for r in grouped.get(o.op_key, ()))]) for o in ops}
    far: Dict[str, float] = {}
    for o in ops:  # var order: inputs come first
        far[o.op_key] = max([own[o.op_key], *(far.get(k, own.get(k, 0.0)) for k in o.inputs)])
    return {k: max(v, jitter.get(k, 0.0)) for k, v in far.items()}


def bands_of(grouped: Mapping[str, List[Sequence[Any]]], wide: Mapping[str, float]) -> Dict[str, Past]:
    """Each operator's past (:class:`Past`) from its rows (:func:`group_history`), a value
    joining only when it was within the band of the values before it."""
    ulps = TWO_ULPS["Float32"]
    out: Dict[str, Past] = {}
    for key, rows in grouped.items():
        w = wide.get(key, 0.0)
        p = out[key] = Past()
        for run_id, _, status, err, local_err, floor, algorithm, created in rows:
            if p.err.judge(err, status, w, ulps) != "regressed":
                p.err.accept(err, status, (run_id, created), algorithm)
            ratio = over_floor(local_err, floor) if local_err is not None else None
            if ratio is not None and judge_local(p.local, ratio) != "regressed":
                p.local.accept(ratio, status, (run_id, created), None)
    return out


@dataclass(frozen=True)
class OpVerdict:
    op_key: str
    name: str
    opr_type: str
    verdict: str
    value: Optional[float]
    band: Tuple[Optional[float], Optional[float]]
    root: bool
    last_good: Optional[Mapping[str, Any]]
    why: str
    algorithm_changed: Optional[str] = None
    #: the option (a sweep's part) the row belongs to; None: the analysis' own comparison
    option: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        return {"op_key": self.op_key, "name": self.name, "opr_type": self.opr_type, "verdict": self.verdict,
                "value": _num(self.value), "band": [_num(self.band[0]), _num(self.band[1])], "root": self.root,
                "last_good": dict(self.last_good) if self.last_good else None, "why": self.why,
                "algorithm_changed": self.algorithm_changed, "option": self.option}


@dataclass(frozen=True)
class Spread:
    """How far one operator's error moved between runs of one build (its largest such spread):
    ``lo``..``hi`` over ``runs`` runs of ``build`` (inf when some were NaN/Inf and some not)."""

    op_key: str
    spread: float
    lo: Optional[float]
    hi: Optional[float]
    runs: int
    build: str


def spreads(rows: Iterable[Sequence[Any]], build_of: Mapping[Any, str]) -> Dict[str, Spread]:
    """Each operator whose own repeated runs differ: rows (``Store.series_ops``'s: run_id,
    op_key, status, max_err, ...) grouped by the build of their run (``build_of``); per
    operator the build where its error spread most (two runs or more)."""
    by: Dict[Tuple[str, str], List[Tuple[Optional[float], str]]] = {}
    for row in rows:
        run_id, key, status, err = row[0], row[1], row[2], row[3]
        b = build_of.get(run_id)
        if b is not None:
            by.setdefault((key, b), []).append((err, status))
    out: Dict[str, Spread] = {}
    for (key, b), vals in by.items():
        if len(vals) < 2:
            continue
        finite = [e for e, _ in vals if e is not None and math.isfinite(e)]
        nonfinite = sum(1 for e, st in vals if e is None and st == "nonfinite" or e is not None and not math.isfinite(e))
        if nonfinite and finite:
            s = math.inf
        elif len(finite) >= 2:
            s = max(finite) - min(finite)
        else:
            continue
        if s > 0 and (key not in out or s > out[key].spread):
            out[key] = Spread(key, s, min(finite) if finite else None, max(finite) if finite else None, len(vals), b)
    return out


def _num(x: Optional[float]) -> Optional[float]:
    return x if x is not None and math.isfinite(x) else None


def _err_why(o: Any, v: str, b: Band, w: float, ulps: float) -> str:
    lo, hi = b.limits(w, ulps)
    m = b.margin(w, ulps)
    what = "jitter band or upstream floors" if m == w else "spread of its past" if m == b.hi - b.lo else "2 ulps"
    if o.max_err is None:
        return "NaN/Inf where every past run was finite"
    side = "above" if v == "regressed" else "below"
    return (f"{o.max_err:.3g} {side} its band [{max(lo, 0):.3g}, {hi:.3g}] (past {b.lo:.3g}..{b.hi:.3g} over {b.n} "
            f"runs{', margin: ' + what if v == 'regressed' else ''})")


def _local_why(o: Any, v: str, b: Band, ratio: float) -> str:
    past = f"past {b.lo:.2g}..{b.hi:.2g} of its floor over {b.n} runs"
    if v == "regressed":
        return f"local error {o.local_err:.3g} is {ratio:.3g}x its floor {o.floor:.3g} ({past})"
    return f"local error {o.local_err:.3g} back within its floor {o.floor:.3g} ({past})"


def judge_run(ops: Sequence[Any], pasts: Mapping[str, Past], wide: Mapping[str, float],
              skip: Iterable[str] = (), option: Optional[str] = None) -> List[OpVerdict]:
    """Each operator row of the checked run against its past; regressed roots first, then the
    other regressed, then the improved, each in the run's order. ``skip``: keys not judged
    (nondeterministic in the checked run's own build); ``option``: the part judged."""
    out: List[OpVerdict] = []
    skipped = set(skip)
    for o in ops:
        p = pasts.get(o.op_key)
        if p is None or o.op_key in skipped:
            continue
        w, ulps = wide.get(o.op_key, 0.0), TWO_ULPS.get(o.dtype or "Float32", TWO_ULPS["Float32"])
        ev = p.err.judge(o.max_err, o.status, w, ulps)
        ratio = over_floor(o.local_err, o.floor)
        lv = judge_local(p.local, ratio)
        whys = []
        if lv in ("regressed", "improved") and ratio is not None:
            whys.append(_local_why(o, lv, p.local, ratio))
        if ev in ("regressed", "improved"):
            whys.append(_err_why(o, ev, p.err, w, ulps))
        v = "regressed" if "regressed" in (ev, lv) else "improved" if "improved" in (ev, lv) else None
        if v is None:
            continue
        lo, hi = p.err.limits(w, ulps) if p.err.n else (None, None)
        algo = None
        if o.algorithm and p.err.algorithms and o.algorithm not in p.err.algorithms:
            algo = f"{' | '.join(sorted(p.err.algorithms))} -> {o.algorithm}"
        good = p.err.last_good or p.local.last_good
        out.append(OpVerdict(o.op_key, o.name, o.opr_type, v, o.max_err, (None if lo is None else max(lo, 0.0), hi),
                             False, good and {"run_id": good[0], "created": good[1]}, "; ".join(whys), algo, option))
    regressed = {v.op_key for v in out if v.verdict == "regressed"}
    inputs = {o.op_key: tuple(o.inputs) for o in ops}
    roots = {k for k in regressed if not (_ancestors(k, inputs) & regressed)}
    out = [OpVerdict(**{**v.__dict__, "root": v.op_key in roots}) for v in out]
    rank = {"regressed": 0, "improved": 1}
    return sorted(out, key=lambda v: (rank[v.verdict], not v.root))


def _ancestors(key: str, inputs: Mapping[str, Tuple[str, ...]]) -> Set[str]:
    seen: Set[str] = set()
    todo = list(inputs.get(key, ()))
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.add(k)
            todo.extend(inputs.get(k, ()))
    return seen


# --------------------------------------------------------------------------- the baseline file

BASELINE_HEADER = ("# lar-prec baseline: one line per model x configuration x kind of device, written by\n"
                   "# `lar-prec baseline update`; `lar-prec check --baseline` fails on a regression and on an\n"
                   "# improvement not recorded here. Lines are sorted and separated by blank lines (merge-friendly).\n")


def baseline_key(run: Mapping[str, Any]) -> str:
    """``model@sha12 | command | config options | device kind`` of a run row or summary dict."""
    opts = " ".join(run.get("options") or ())
    cfg = (run.get("config") or "-") + (f" {opts}" if opts else "")
    return (f"{run.get('model_name') or '?'}@{(run.get('model_sha256') or '?')[:12]} | {run.get('command')} | {cfg} | "
            f"{run.get('device_kind') or '?'}")


def baseline_line(run: Mapping[str, Any]) -> str:
    verdict = "ok" if not run.get("exit_code") else "divergent"
    err = run.get("output_err")
    err = None if err is None or not math.isfinite(err) else err  # a line is read back as finite or null
    return (f"{baseline_key(run)} | verdict={verdict} output_err={'null' if err is None else format(err, '.3e')} "
            f"roots={run.get('n_roots') or 0}")


def parse_baseline(text: str, where: str) -> Dict[str, Dict[str, Any]]:
    """Baseline lines by key. Raises UsageError naming the file and line when one is malformed."""
    out: Dict[str, Dict[str, Any]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, values = line.rpartition(" | ")
        fields = dict(kv.split("=", 1) for kv in values.split() if "=" in kv)
        if not sep or set(fields) != {"verdict", "output_err", "roots"} or fields["verdict"] not in ("ok", "divergent"):
            raise UsageError(f"{where} line {n}: expected '<key> | verdict=ok|divergent output_err=<float|null> "
                             f"roots=<int>' (a lar-prec baseline)")
        try:
            err = None if fields["output_err"] == "null" else float(fields["output_err"])
            roots = int(fields["roots"])
        except ValueError:
            raise UsageError(f"{where} line {n}: output_err must be a number or null and roots an integer") from None
        if (err is not None and not (math.isfinite(err) and err >= 0)) or roots < 0:
            raise UsageError(f"{where} line {n}: output_err={fields['output_err']} roots={fields['roots']}: expected "
                             "a finite error >= 0 (null when the run had none) and roots >= 0")
        out[key] = {"verdict": fields["verdict"], "output_err": err, "roots": roots}
    return out


def baseline_text(lines: Mapping[str, str]) -> str:
    return BASELINE_HEADER + "".join(f"\n{lines[k]}\n" for k in sorted(lines))


def judge_baseline(run: Mapping[str, Any], recorded: Optional[Mapping[str, Any]], margin: float) -> Tuple[str, str]:
    """(``regressed`` | ``improved`` | ``same`` | ``unrecorded``, why) of a run against its
    baseline line. ``margin``: the output error's own band (see :func:`output_margin`)."""
    if recorded is None:
        return "unrecorded", "no baseline line for this model and configuration: run `lar-prec baseline update`"
    verdict = "ok" if not run.get("exit_code") else "divergent"
    err, rec = run.get("output_err"), recorded["output_err"]
    roots, rec_roots = int(run.get("n_roots") or 0), int(recorded["roots"])
    worse = (verdict == "divergent" and recorded["verdict"] == "ok") or roots > rec_roots or (
        err is not None and rec is not None and err > rec + margin) or (err is None and rec is not None)
    better = (verdict == "ok" and recorded["verdict"] == "divergent") or roots < rec_roots or (
        err is not None and rec is not None and err < rec - margin)
    now = f"verdict={verdict} output_err={'null' if err is None else format(err, '.3e')} roots={roots}"
    was = f"verdict={recorded['verdict']} output_err={'null' if rec is None else format(rec, '.3e')} roots={rec_roots}"
    if worse:
        return "regressed", f"baseline {was}, now {now}"
    if better:
        return "improved", (f"baseline {was}, now {now}: an improvement the baseline does not record; if it is "
                            "expected, run `lar-prec baseline update` and commit the file")
    return "same", f"as recorded ({was})"


def output_margin(recorded: Optional[float], past: Sequence[float]) -> float:
    """The band of the output error: its spread over the series' past, 2 ulps, and half a unit
    of the 3 significant digits the baseline keeps."""
    spread = (max(past) - min(past)) if past else 0.0
    return max(spread, TWO_ULPS["Float32"], abs(recorded or 0.0) * 5e-3)
