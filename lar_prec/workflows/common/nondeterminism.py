"""Is a wrong value the same bits run after run, or does it change from run to run? The one
place every workflow asks it (``diff``'s side B, ``bisect``'s bad build, a ``zoo`` task whose
result is wrong; ``sweep`` and ``mixed`` can use it the same way).

:func:`rerun_and_compare` runs the same thing once more (the caller's ``rerun``: same binary,
model, inputs, flags and environment) and compares the two dumps bitwise, var by var
(:func:`compare_runs`). Where they differ, the **operator** named is the first (in execution
order) whose output differs while every compared input of it is bitwise the same: on the same
inputs it gave other bits, so it reads memory it did not write, or races (a var computed from
constants alone counts as a constant: named where it first meets data, as local error does) (MegEngine's float16
max pooling under ``--enable-ioc16`` on x86 does: its output differs on every run). Where they
are the same bits, the wrong value is a deterministic bug (or a deterministic choice), not a
race. :func:`from_band` says the same from a side that already ran several times (a shake's
jitter per var: ``diff``'s sides), without another run.

The answer is a :class:`RunToRun` (``to_json()``: ``same_bits``, ``operators`` with each one's
``spread``, ``spread``, ``n_differ``, ``runs``, ``under``, ``words``).

Example::

    from lar_prec.workflows.common.nondeterminism import rerun_and_compare
    rr = rerun_and_compare(rec.dump_dir, lambda: run_once(...).dump_dir, work, under="--enable-ioc16")
    print(rr.words)

Two records answer it: :class:`RunToRun` (``diff``, ``bisect``, ``zoo``: where the differences
start, through the comparison engine) and :class:`Nondeterminism` (``sweep``, ``mixed``: the
first var whose bits differ, how many elements, the spread at the outputs; :func:`rerun_compare`).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.compare.namepair import skip_reason
from lar_prec.compare.records import AGREEING
from lar_prec.compare.tolerance import fmt_num
from lar_prec.dumps.folder import DumpFolder
from lar_prec.records import PathLike, json_number

#: why an operator gives other bits on the same inputs (what the words say it is)
WHY = "reads memory it did not write, or races"
WHY_DIFFERS = WHY
#: operators without inputs that bring data in (not constants)
DATA_INPUTS = frozenset({"Host2DeviceCopy"})


@dataclass(frozen=True)
class RunToRun:
    """Two (or more) runs of one setting compared. ``same_bits``: the watched vars (all when
    none were named) are bitwise the same; ``operators``: where the differences start (each a
    dict ``id``, ``name``, ``opr_type``, ``spread``: the largest ``max_err`` between runs of its
    output), first in execution order; ``spread``: the largest ``max_err`` between runs over
    the watched vars; ``runs``: how many runs were compared; ``under``: the flags or option it
    ran under (words only)."""

    same_bits: bool
    operators: Tuple[Mapping[str, Any], ...] = ()
    spread: float = 0.0
    n_differ: int = 0
    runs: int = 2
    under: str = ""

    @property
    def nondeterministic(self) -> bool:
        return not self.same_bits

    @property
    def words(self) -> str:
        if self.same_bits:
            return f"the same bits in all {self.runs} runs: deterministic (a difference that repeats, not a race)"
        under = f" under {self.under}" if self.under else ""
        if not self.operators:
            return f"the result differs from run to run{under} (spread {_num(self.spread)})"
        o = self.operators[0]
        more = f" (and {len(self.operators) - 1} more operator(s))" if len(self.operators) > 1 else ""
        return (f"{o['name']} ({o['opr_type']}) is nondeterministic{under}: on the same inputs its output differs "
                f"from run to run (spread {_num(o['spread'])}): it {WHY}{more}")

    def to_json(self) -> Dict[str, Any]:
        return {"same_bits": self.same_bits, "nondeterministic": self.nondeterministic,
                "operators": [dict(o, spread=json_number(o["spread"])) for o in self.operators],
                "spread": json_number(self.spread), "n_differ": self.n_differ, "runs": self.runs,
                "under": self.under or None, "words": self.words}


def _num(x: Optional[float]) -> str:
    return "NaN/Inf" if x is None or not math.isfinite(x) else f"{x:.3g}"


def _spread(d: Any) -> float:
    """A var's difference between two runs (inf where one run made NaN/Inf or a shape differs)."""
    if d.max_err is not None:
        return float(d.max_err)
    return math.inf


def static_vars(folder: DumpFolder) -> Set[int]:
    """Vars computed from constants alone (a weight's relayout, a folded constant): part of the
    model's constants, as local error holds them; a difference there is named where it first
    meets data (the operator that reads it)."""
    out: Set[int] = set()
    for vid in folder.ids:  # inputs come first
        d = folder[vid]
        # an input the dump does not hold is no data either (a shape, a value load_and_run folded)
        ins = [u for u in d.input_ids if u != vid and u in folder]
        if (not ins and d.var.opr_type not in DATA_INPUTS) or (ins and all(u in out for u in ins)):
            out.add(vid)
    return out


def _starts(folder: DumpFolder, moved: Mapping[int, float]) -> List[Dict[str, Any]]:
    """The vars (not static) that differ while none of their inputs that differ is data."""
    static = static_vars(folder)
    ops = []
    for vid in folder.ids:
        if vid not in moved or vid in static:
            continue
        if not any(u in moved and u not in static and u != vid for u in folder[vid].input_ids):
            v = folder[vid].var
            ops.append({"id": int(vid), "name": v.name, "opr_type": v.opr_type, "spread": float(moved[vid])})
    return ops


def compare_runs(first: PathLike, again: PathLike, *, watched: Sequence[int] = (), under: str = "") -> RunToRun:
    """Two whole dumps of the same graph and setting compared bitwise (see the module docstring).

    Raises:
        LarPrecError: a dump cannot be read.
    """
    comp = compare_folders(first, again, threshold=0.0, jobs=min(2, os.cpu_count() or 1))
    differ = {d.id: _spread(d) for d in comp.diffs if d.status not in AGREEING}
    look = [i for i in watched if i in differ] if watched else list(differ)
    spread = max((differ[i] for i in look), default=0.0)
    ops = tuple(_starts(DumpFolder(first), differ)) if look else ()
    return RunToRun(not look, ops, spread, len(differ), 2, under)


def rerun_and_compare(first: PathLike, rerun: Callable[[], PathLike], *, watched: Sequence[int] = (),
                      under: str = "") -> RunToRun:
    """Run once more (``rerun()`` returns the new run's dump folder) and compare with ``first``.

    Raises:
        RunError / RunTimeout (exit 3): the run again failed; LarPrecError: a dump cannot be read.
    """
    return compare_runs(first, rerun(), watched=watched, under=under)


def from_band(dump: PathLike, band: Mapping[int, float], *, watched: Sequence[int] = (), runs: int = 2,
              under: str = "") -> RunToRun:
    """The same answer from a side that ran ``runs`` times already: ``band`` its largest
    difference from run 1 per var id of ``dump`` (run 1's dump; inf where a later run turned a
    value NaN/Inf). The operators are the vars that differ while every input of theirs in
    ``band`` is 0."""
    moved = {i: float(b) for i, b in band.items() if b != 0}
    look = [i for i in watched if i in moved] if watched else sorted(moved)
    spread = max((moved[i] for i in look), default=0.0)
    ops = tuple(_starts(DumpFolder(dump), moved)) if look else ()
    return RunToRun(not look, ops, spread, len(moved), runs, under)


@dataclass(frozen=True)
class Nondeterminism:
    """Two runs of one command against each other, bit for bit (see the module docstring).

    ``compared``: vars found in both dumps; ``differing``: how many of them differ in any bit.
    ``var_id``/``name``/``opr_type``: the first var, in execution order, whose bits differ (None
    when none does); ``spread``: MegEngine's ``max_err`` between the two runs there (inf: NaN/Inf
    in one run only); ``elements`` of its ``size`` differ; ``output_spread``: the largest
    ``max_err`` between the two runs at the model's outputs. ``why``: the comparison could not be
    made (the second run failed): nothing is told then.
    """

    first_dir: str
    second_dir: str
    compared: int = 0
    differing: int = 0
    var_id: Optional[int] = None
    name: Optional[str] = None
    opr_type: Optional[str] = None
    spread: Optional[float] = None
    elements: int = 0
    size: int = 0
    output_spread: Optional[float] = None
    why: str = ""

    @property
    def told(self) -> bool:
        return not self.why

    @property
    def differs(self) -> bool:
        """The two runs gave other bits somewhere: the value is not reproducible."""
        return self.told and self.differing > 0

    @property
    def same_bits(self) -> bool:
        """Both runs gave the same bits at every var compared (a deterministic bug, as far as two runs show)."""
        return self.told and self.compared > 0 and self.differing == 0

    def words(self, where: str) -> str:
        """One line: ``nondeterministic under ioc16: Pooling[0] (PoolingForward) ...``, ``where``
        naming the configuration (an option, ``the default run``, a side)."""
        if not self.told:
            return f"not told whether the wrong value under {where} repeats: {self.why}"
        if self.same_bits:
            return (f"deterministic under {where}: a second run gave the same bits at all {self.compared} vars "
                    "(the wrong value repeats: a deterministic bug, as far as two runs show)")
        if not self.differs:
            return f"not told whether the wrong value under {where} repeats: no var of the two runs could be compared"
        out = "" if self.output_spread is None else f", {fmt_num(self.output_spread)} at the outputs"
        return (f"nondeterministic under {where}: {self.name} ({self.opr_type}) is the first of {self.differing} "
                f"var(s) whose values differ between two runs of the same command ({self.elements} of {self.size} "
                f"elements; spread {fmt_num(self.spread)} between the runs{out}): {WHY_DIFFERS}")

    def to_json(self) -> Dict[str, Any]:
        return {"told": self.told, "same_bits": self.same_bits, "differs": self.differs,
                "compared": self.compared, "differing": self.differing,
                "first": None if self.var_id is None else {
                    "id": self.var_id, "name": self.name, "opr_type": self.opr_type,
                    "spread": json_number(self.spread), "nonfinite": self.spread is not None and
                    not math.isfinite(self.spread), "elements": self.elements, "size": self.size},
                "output_spread": json_number(self.output_spread),
                "output_nonfinite": self.output_spread is not None and not math.isfinite(self.output_spread),
                "first_dir": self.first_dir, "second_dir": self.second_dir, "why": self.why or None}


def not_told(first_dir: PathLike, second_dir: PathLike, why: str) -> Nondeterminism:
    """The record of a rerun that could not be compared (it failed, or left no dump): ``why``."""
    return Nondeterminism(str(first_dir), str(second_dir), why=why)


def _bits_differ(a: Any, b: Any) -> int:
    """How many elements of two arrays of one shape and dtype differ in any bit."""
    x = np.ascontiguousarray(a).view(np.uint8).reshape(a.size, -1)
    y = np.ascontiguousarray(b).view(np.uint8).reshape(b.size, -1)
    return int(np.count_nonzero((x != y).any(axis=1)))


def _bits_spread(a: Any, b: Any) -> float:
    try:
        return max_megengine_err(a, b)
    except (TypeError, ValueError):  # a dtype the metric does not take: the bits differ, no measure
        return math.inf


def rerun_compare(first_dump: PathLike, second_dump: PathLike) -> Nondeterminism:
    """Two dump folders of the same command (the first run and its rerun) compared bit for bit:
    the first var in the first run's execution order whose values differ, with its spread, and
    the spread at the outputs (see :class:`Nondeterminism`). Raises what :class:`DumpFolder`
    raises on a folder that cannot be read."""
    fa, fb = DumpFolder(first_dump), DumpFolder(second_dump)
    by_name: Dict[str, Optional[int]] = {}
    for d in fb:
        by_name[d.var.name] = None if d.var.name in by_name else d.id  # a name twice pairs by id only
    consumed = {u for d in fa for u in d.input_ids}
    compared = differing = 0
    first: Optional[Dict[str, Any]] = None
    out_spread: Optional[float] = None
    for d in fa:
        b_id = d.id if d.id in fb and fb[d.id].var.name == d.var.name else by_name.get(d.var.name)
        if b_id is None:
            continue
        a, b = np.asarray(d.array()), np.asarray(fb[b_id].array())
        compared += 1
        if a.shape != b.shape or a.dtype != b.dtype:
            n, spread = max(a.size, b.size), math.inf
        else:
            n = _bits_differ(a, b)
            spread = _bits_spread(a, b) if n else 0.0
        if n:
            differing += 1
            if first is None:
                first = {"var_id": d.id, "name": d.var.name, "opr_type": d.var.opr_type, "spread": spread,
                         "elements": n, "size": int(a.size)}
        if d.id not in consumed and not skip_reason(d.var):
            out_spread = spread if out_spread is None else max(out_spread, spread)
    return Nondeterminism(str(first_dump), str(second_dump), compared, differing, output_spread=out_spread,
                          **(first or {}))


__all__ = ["RunToRun", "WHY", "WHY_DIFFERS", "Nondeterminism", "compare_runs", "from_band", "rerun_and_compare",
           "rerun_compare", "not_told"]
