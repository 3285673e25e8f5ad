"""A stored run's speed against its history: ``check`` and ``history`` on the store's
``speeds`` rows (the zoo times every task; ``sweep --speed-runs`` times its options).

Speed is comparable only on one **machine**: the same CPU model, the same threads and the same
load_and_run (the bundled runner, or a binary's path: a new build at the same path is what a
slower build is judged against, so its sha256 is not part of it). History timed on another
machine is skipped, and said so. Per part (the plain default run, each option), along the runs
of the same model, input, command, configuration and options:

* walking the past on this machine in time order, a result's spread (from the lowest lower
  quartile of its rounds' iterations to the highest upper quartile) joins the band when fewer
  than ``min_history`` results have joined yet, or when its median time per iteration was not
  above the band so far (a past regression never widens the band);
* below ``min_history`` past results (the precision check's rule, ``--min-history``) nothing is
  judged: "not judged: N of M results needed";
* the checked run's median time per iteration above the band **regressed** (as a precision
  regression: exit 1), below it **faster** (reported, never a failure), else within.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.store.db import Store, run_summary_of
from lar_prec.store.summary import SpeedSummary


@dataclass(frozen=True)
class SpeedVerdict:
    """One timed part of the checked run against its past on the same machine.

    ``verdict``: ``regressed``, ``faster``, ``within``, ``not_judged`` (fewer than ``needed``
    past results) or ``not_timed`` (its timed runs failed). ``band``: the past's spread (ms per
    iteration); ``history``: past results on this machine; ``skipped``: past results timed on
    another machine."""

    option: Optional[str]
    verdict: str
    median_ms: Optional[float]
    band: Tuple[Optional[float], Optional[float]]
    history: int
    needed: int
    machine: str
    skipped: int
    why: str
    last_good: Optional[Mapping[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        return {"option": self.option, "verdict": self.verdict, "median_ms": self.median_ms,
                "band_ms": list(self.band), "history": self.history, "needed": self.needed, "machine": self.machine,
                "skipped_other_machines": self.skipped, "why": self.why,
                "last_good": dict(self.last_good) if self.last_good else None}


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3g} ms"


def _part(p: str) -> Optional[str]:
    return p or None


def band_walk(past: Sequence[Tuple[Mapping[str, Any], SpeedSummary]], min_history: int
              ) -> Tuple[Optional[float], Optional[float], int, Optional[Mapping[str, Any]], Optional[Dict[str, Any]]]:
    """(lo, hi, results accepted, the newest accepted run row, the first result above the band
    once judged: ``run``, ``created``, ``value``, ``band``) of one part's timed past, oldest first."""
    lo = hi = None
    n = 0
    last = None
    first_out = None
    for row, s in past:
        if s.median_ms is None or s.spread_lo is None or s.spread_hi is None:
            continue
        if n >= min_history and hi is not None and s.median_ms > hi:
            if first_out is None:
                first_out = {"run": row["uid"], "created": row["created"], "value": s.median_ms, "band": [lo, hi]}
            continue
        lo = s.spread_lo if lo is None else min(lo, s.spread_lo)
        hi = s.spread_hi if hi is None else max(hi, s.spread_hi)
        n += 1
        last = row
    return lo, hi, n, last, first_out


def judge_speed(store: Store, run: Mapping[str, Any], start: Optional[str], min_history: int) -> List[SpeedVerdict]:
    """Each timed part of a stored run (a row of :meth:`Store.runs`) against the past of the same
    part on the same machine (see the module docstring); empty when the run was not timed."""
    mine = store.speeds(run["id"])
    if not mine:
        return []
    history = [(r, s) for r, s in store.speed_history(dict(run), before=run["id"])
               if (start is None or r["created"] >= start) and s.status == "timed" and s.median_ms is not None]
    out = []
    for s in mine:
        same = [(r, p) for r, p in history if p.part == s.part and p.machine == s.machine]
        other = sum(1 for _, p in history if p.part == s.part and p.machine != s.machine)
        where = s.machine_words
        if s.status != "timed" or s.median_ms is None:
            out.append(SpeedVerdict(_part(s.part), "not_timed", None, (None, None), len(same), min_history, where, other,
                                    f"timing {s.status.replace('_', ' ')}" + (f": {s.reason}" if s.reason else "")))
            continue
        lo, hi, n, last, _ = band_walk(same, min_history)
        good = None if last is None else {"uid": last["uid"], "created": last["created"],
                                          "build": run_summary_of(dict(last)).build}
        if n < min_history:
            out.append(SpeedVerdict(_part(s.part), "not_judged", s.median_ms, (lo, hi), n, min_history, where, other,
                                    f"not judged: {n} of {min_history} results needed (on {where})"))
            continue
        assert lo is not None and hi is not None
        past = f"its past {lo:.3g}..{hi:.3g} ms over {n} results on {where}"
        if s.median_ms > hi:
            v, why = "regressed", f"{_ms(s.median_ms)} per iteration, slower than {past}"
        elif s.median_ms < lo:
            v, why = "faster", f"{_ms(s.median_ms)} per iteration, faster than {past}"
        else:
            v, why = "within", f"{_ms(s.median_ms)} per iteration, within {past}"
        out.append(SpeedVerdict(_part(s.part), v, s.median_ms, (lo, hi), n, min_history, where, other, why, good))
    return out


def speed_words(verdicts: Sequence[SpeedVerdict]) -> str:
    """The check's speed part in one line ("" when the run was not timed)."""
    if not verdicts:
        return ""
    name = {None: "the default run"}
    regressed = [v for v in verdicts if v.verdict == "regressed"]
    faster = [v for v in verdicts if v.verdict == "faster"]
    judged = [v for v in verdicts if v.verdict in ("regressed", "faster", "within")]
    if regressed:
        v = regressed[0]
        text = f"speed regressed under {name.get(v.option, v.option)}: {v.why}"
        if len(regressed) > 1:
            text += f" (+{len(regressed) - 1} more)"
    elif judged:
        text = f"speed: {len(judged)} part(s) judged, none slower" + (
            f"; faster under {', '.join(name.get(v.option, v.option) for v in faster)}" if faster else "")  # type: ignore[misc]
    else:
        v = verdicts[0]
        text = f"speed {v.why}" if v.verdict == "not_judged" else f"speed not judged: {v.why}"
    skipped = max(v.skipped for v in verdicts)
    if skipped:
        text += f"; {skipped} past result(s) timed on another machine (CPU model, threads or load_and_run) skipped"
    return text
