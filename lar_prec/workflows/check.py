"""``lar-prec check``: an analysis judged against the store's history, per operator, and
against a committed baseline (the CI ratchet). The rule is docs/history.md's:

Each operator of the checked run is compared with its own past along the run's **series**
(same model, input, command, configuration and options, same kind of device; builds and time
vary). Walking the past in time order, a value joins the operator's band when it lies within
the band so far (so a past regression never widens it), and the band is

    [lo - m, hi + m],  m = max(jitter, floor, spread, 2 ulps)

where ``lo``/``hi`` are the smallest and largest accepted past errors, ``spread = hi - lo``
(the run-to-run jitter the history itself shows), ``jitter`` the band shake measured for the
operator (the largest ``max_err`` over the shake runs of this model, input and device kind),
``floor`` its rounding floor (local error's, when measured), and 2 ulps = 2^-22 for float32
(2^-9 for float16): ``max_err`` divides by ``max(|a|, |b|, 1)``, so a rounding tie of the
output moves it by less than that. An operator **regresses** when its error is above the band
or turns NaN/Inf where its past was finite, and **improves** when it is below it. Among the
regressed, the **root** is one none of whose inputs (transitively) regressed: listed first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from lar_prec.errors import UsageError

#: 2 ulps of max_err's scale per dtype (see the module docstring)
TWO_ULPS = {"Float32": 2.0 ** -22, "Float16": 2.0 ** -9, "BFloat16": 2.0 ** -6}


@dataclass
class Band:
    """One operator's accepted past: the band so far and the last run that was within it."""

    lo: float = math.inf
    hi: float = -math.inf
    n: int = 0
    last_good: Optional[Mapping[str, Any]] = None
    algorithms: Set[str] = field(default_factory=set)
    finite: bool = True

    def margin(self, jitter: float, floor: float, ulps: float) -> float:
        spread = self.hi - self.lo if self.n else 0.0
        return max(jitter, floor, spread, ulps)

    def limits(self, jitter: float, floor: float, ulps: float) -> Tuple[float, float]:
        m = self.margin(jitter, floor, ulps)
        return self.lo - m, self.hi + m

    def judge(self, err: Optional[float], status: str, jitter: float, floor: float, ulps: float) -> str:
        """``regressed``, ``improved``, ``within`` or ``new`` (no past yet)."""
        nonfinite = err is None and status == "nonfinite"
        if not self.n:
            return "new"
        if nonfinite:
            return "regressed" if self.finite else "within"
        if err is None:
            return "within"
        lo, hi = self.limits(jitter, floor, ulps)
        return "regressed" if err > hi else "improved" if err < lo and lo > 0 else "within"

    def accept(self, err: Optional[float], status: str, run: Mapping[str, Any], algorithm: Optional[str]) -> None:
        if err is None:
            if status == "nonfinite":
                self.finite = False
            return
        self.lo, self.hi, self.n = min(self.lo, err), max(self.hi, err), self.n + 1
        self.last_good = run
        if algorithm:
            self.algorithms.add(algorithm)


def bands_of(history: Iterable[Any], jitter: Mapping[str, float]) -> Dict[str, Band]:
    """The band of every operator from a series' past rows (time order), a past value joining
    only when it was within the band of the values before it."""
    bands: Dict[str, Band] = {}
    for row in history:
        b = bands.setdefault(row.op_key, Band())
        floor = row.floor or 0.0
        verdict = b.judge(row.max_err, row.status, jitter.get(row.op_key, 0.0), floor, TWO_ULPS["Float32"])
        if verdict in ("new", "within", "improved"):
            b.accept(row.max_err, row.status, {"run_id": row.run_id, "created": row.created}, row.algorithm)
    return bands


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

    def to_json(self) -> Dict[str, Any]:
        return {"op_key": self.op_key, "name": self.name, "opr_type": self.opr_type, "verdict": self.verdict,
                "value": _num(self.value), "band": [_num(self.band[0]), _num(self.band[1])], "root": self.root,
                "last_good": dict(self.last_good) if self.last_good else None, "why": self.why,
                "algorithm_changed": self.algorithm_changed}


def _num(x: Optional[float]) -> Optional[float]:
    return x if x is not None and math.isfinite(x) else None


def judge_run(ops: Sequence[Any], bands: Mapping[str, Band], jitter: Mapping[str, float]) -> List[OpVerdict]:
    """Each operator row of the checked run against its band; regressed roots first, then the
    other regressed, then the improved, each in the run's order."""
    out: List[OpVerdict] = []
    for o in ops:
        b = bands.get(o.op_key)
        if b is None:
            continue
        j, fl, ulps = jitter.get(o.op_key, 0.0), o.floor or 0.0, TWO_ULPS.get(o.dtype or "Float32", TWO_ULPS["Float32"])
        v = b.judge(o.max_err, o.status, j, fl, ulps)
        if v not in ("regressed", "improved"):
            continue
        lo, hi = b.limits(j, fl, ulps)
        m = b.margin(j, fl, ulps)
        what = ("jitter band from shake" if m == j else "floor" if m == fl else "spread of its past" if m == b.hi - b.lo
                else "2 ulps")
        if o.max_err is None:
            why = "NaN/Inf where every past run was finite"
        elif v == "regressed":
            why = f"{o.max_err:.3g} above its band [{max(lo, 0):.3g}, {hi:.3g}] (past {b.lo:.3g}..{b.hi:.3g} over {b.n} runs, margin: {what})"
        else:
            why = f"{o.max_err:.3g} below its band [{max(lo, 0):.3g}, {hi:.3g}] (past {b.lo:.3g}..{b.hi:.3g} over {b.n} runs)"
        algo = None
        if o.algorithm and b.algorithms and o.algorithm not in b.algorithms:
            algo = f"{' | '.join(sorted(b.algorithms))} -> {o.algorithm}"
        out.append(OpVerdict(o.op_key, o.name, o.opr_type, v, o.max_err, (max(lo, 0.0), hi), False, b.last_good,
                             why, algo))
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
