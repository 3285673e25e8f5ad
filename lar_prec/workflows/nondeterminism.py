"""Is a wrong value the same bits run after run, or does it differ (issue 51 #6)?

A run whose output is wrong is made once more, in a fresh process with the same command line
(the workflow does that: each has its own runner); :func:`rerun_compare` then reads the two dump
folders var by var, in execution order, bit for bit. Two outcomes, each a finding of its own:

* every var the same bits: the wrong value is **reproducible** (a deterministic bug, as far as two
  runs show; one more run could still differ, and its words say two runs);
* some var differs: the first one in execution order is where the runs part, named with its
  operator type and the **spread** the two runs measured there (MegEngine's ``max_err`` between
  them, NaN/Inf in one run only counting as infinite) and at the outputs. A kernel whose output
  differs between two runs of the same command on the same inputs **reads memory it did not
  write, or races** (MegEngine's float16 max pooling under ``--enable-ioc16`` on some x86 CPUs:
  output error 0.044, 0.048, 0.053 or NaN from one run to the next).

The two runs are of the same graph (same model, same flags): vars pair by id, and by name where
a renumbering moved them. Numpy runs only in :func:`rerun_compare`.

Example::

    from lar_prec.workflows.nondeterminism import rerun_compare
    n = rerun_compare("sweep-1/ioc16/dump", "sweep-1/ioc16-again/dump")
    print(n.words("ioc16"))
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional

from lar_prec._lazy import numpy as np
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.compare.namepair import skip_reason
from lar_prec.compare.tolerance import fmt_num
from lar_prec.dumps.folder import DumpFolder
from lar_prec.records import PathLike, json_number

#: what a kernel whose output differs run to run on the same inputs does, in the report's words
WHY_DIFFERS = "reads memory it did not write, or races"


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


def _spread(a: Any, b: Any) -> float:
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
            spread = _spread(a, b) if n else 0.0
        if n:
            differing += 1
            if first is None:
                first = {"var_id": d.id, "name": d.var.name, "opr_type": d.var.opr_type, "spread": spread,
                         "elements": n, "size": int(a.size)}
        if d.id not in consumed and not skip_reason(d.var):
            out_spread = spread if out_spread is None else max(out_spread, spread)
    return Nondeterminism(str(first_dump), str(second_dump), compared, differing, output_spread=out_spread,
                          **(first or {}))
