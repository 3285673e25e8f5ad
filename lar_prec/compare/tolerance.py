"""The tolerance of a model's outputs under a configuration: one rule, shared by ``sweep``,
``mixed`` and ``naive-vs-default`` (docs/threshold.md, "The tolerance of a model's outputs").

    tolerance = max(band, LEVEL_FACTOR x level)

* ``level``: the output error the same arithmetic reaches with correct kernels: the naive
  kernels under the configuration's options against the plain naive reference (under a float16
  option: what float16 done right gives on these inputs); 0 where the configuration keeps the
  reference's arithmetic (naive-vs-default, options that keep float32);
* ``band``: the top of the auto-threshold band of the dtype the configuration computes in
  (:func:`lar_prec.compare.threshold.band`: 80 eps for float32, 8 eps for float16);
* ``LEVEL_FACTOR`` (2): a second correct implementation of the same arithmetic (another
  summation order, another blocking) is another draw of the same rounding, and its largest
  output error lies within twice the first draw's (the derivation and the measured ratios are
  in docs/threshold.md); a wrong kernel is orders of magnitude beyond.

:class:`OutputTolerance` carries the numbers and says them in the words every command prints:
``output error E (tolerance T = max(band B, 2 x level L of correct float16))``.

:func:`run_verdict` is the one verdict of a run against the reference, from its operators' local
error and its outputs' tolerance: ``naive-vs-default`` and the sweep's rows (the default run's and
each option's, before what an option adds over the default run) say it, in the same words. Numpy-free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Sequence

from lar_prec.compare.threshold import band

#: how many times the output error of correct kernels a configuration's output may reach
LEVEL_FACTOR = 2.0
#: dtype names as the bands know them, from the names the runs and floors use
_DTYPES = {"float32": "Float32", "float16": "Float16", "bfloat16": "BFloat16"}
#: coarser first: the arithmetic of a model whose outputs mix dtypes is its coarsest one
_COARSE = ("BFloat16", "Float16", "Float32")


def arithmetic_dtype(output_dtypes: Iterable[str] = (), compute: Optional[str] = None) -> str:
    """The float dtype a configuration's outputs are computed in: ``compute`` (``float16``
    under an fp16 option) when given, else the coarsest float dtype among the outputs'
    (Float32 when none is a float: integer outputs are held to float32's band)."""
    if compute:
        return _DTYPES.get(compute.lower(), compute)
    names = {_DTYPES.get(d.lower(), d) for d in output_dtypes}
    return next((d for d in _COARSE if d in names), "Float32")


def fmt_num(x: Optional[float]) -> str:
    """An error or tolerance in the tolerance's words, as the reports write errors: 3 significant
    digits (``0.0119``, ``9.54e-06``), ``0`` for zero."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if not math.isfinite(x):  # MegEngine's error is inf where one side has NaN/Inf
        return "NaN/Inf"
    return f"{x:.3g}" if 1e-3 <= abs(x) < 1e4 else f"{x:.2e}"


@dataclass(frozen=True)
class OutputTolerance:
    """The tolerance of a configuration's outputs (see the module docstring).

    ``dtype``: the arithmetic (``Float32``, ``Float16``). ``level``: the output error of correct
    kernels in it (0: the reference's own arithmetic; None: not measured, ``why``). ``given``:
    a tolerance the user gave (``mixed --tolerance``), which replaces the rule's value.
    """

    dtype: str
    level: Optional[float]
    why: str = ""
    given: Optional[float] = None

    @property
    def band(self) -> float:
        return band(self.dtype)[1]

    @property
    def rule(self) -> float:
        """``max(band, LEVEL_FACTOR x level)`` (the band alone when the level is unknown or not finite)."""
        lvl = self.level if self.level is not None and math.isfinite(self.level) else 0.0
        return max(self.band, LEVEL_FACTOR * lvl)

    @property
    def value(self) -> float:
        return self.given if self.given is not None else self.rule

    def holds(self, err: Optional[float]) -> bool:
        """True when output error ``err`` is within (NaN, Inf and None never are)."""
        return err is not None and math.isfinite(err) and err <= self.value

    @property
    def measured(self) -> bool:
        """The tolerance stands on a bound of its own: a level of correct arithmetic that was
        measured and is not 0, or the user's value. With level 0 (the reference's own arithmetic)
        it is the band alone, which does not grow with the depth of the graph: rounding that
        accumulates through many operators, each within its bound, can pass it."""
        if self.given is not None:
            return True
        return self.level is not None and math.isfinite(self.level) and self.level > 0

    def _correct(self) -> str:
        return "correct " + self.dtype.lower()

    def explain(self) -> str:
        """``tolerance T = max(band B, 2 x level L of correct float16)``, or what stands for it."""
        if self.given is not None:
            lvl = "not measured" if self.level is None else f"reaches {fmt_num(self.level)}"
            return f"tolerance {fmt_num(self.given)}, given; {self._correct()} {lvl}"
        if self.level is None:
            return (f"tolerance {fmt_num(self.value)} = band {fmt_num(self.band)}; level of {self._correct()} "
                    f"not measured{': ' + self.why if self.why else ''}")
        return (f"tolerance {fmt_num(self.value)} = max(band {fmt_num(self.band)}, {LEVEL_FACTOR:g} x level "
                f"{fmt_num(self.level)} of {self._correct()})")

    def words(self, err: Optional[float]) -> str:
        """``output error E (tolerance T = max(band B, 2 x level L of correct float16))``: the words
        sweep, mixed and naive-vs-default print."""
        e = "not measured" if err is None else fmt_num(err)
        return f"output error {e} ({self.explain()})"

    def to_json(self) -> Dict[str, Any]:
        lvl = self.level if self.level is None or math.isfinite(self.level) else None
        return {"value": self.value, "band": self.band, "level": lvl, "factor": LEVEL_FACTOR, "dtype": self.dtype,
                "given": self.given, "why": self.why or None, "text": self.explain()}


def output_tolerance(dtype: str, level: Optional[float], why: str = "",
                     given: Optional[float] = None) -> OutputTolerance:
    """The tolerance of outputs computed in ``dtype`` whose correct kernels reach ``level``."""
    return OutputTolerance(arithmetic_dtype((), dtype), level, why, given)


@dataclass(frozen=True)
class RunVerdict:
    """The verdict of one run against the reference (:func:`run_verdict`): ``verdict`` ``ok`` or
    ``diverges``; ``rule`` ``local`` (by operators' local error), ``output`` (by the outputs'
    tolerance) or ``dump`` (by the dumps); ``words``: the outputs' line, in words that follow the
    verdict (never "out of tolerance" beside ``ok``)."""

    verdict: str
    rule: str
    words: str

    @property
    def diverges(self) -> bool:
        return self.verdict == "diverges"


def run_verdict(err: Optional[float], tol: OutputTolerance, *, local_measured: bool,
                local_roots: Sequence[str] = (), findings: bool = False) -> RunVerdict:
    """One run's verdict against the reference (naive-vs-default, and each row of a sweep).

    ``err``: its outputs' error (None: not compared; inf: NaN/Inf where the reference is finite).
    ``local_roots``: the operators whose local error is outside their bound. ``findings``: what
    the dumps found that local error cannot speak for (a var missing or non-finite, an output not
    compared, a root local error did not measure); without local error, the dumps' own verdict.

    1. A local root, or NaN/Inf at an output: diverges.
    2. With local error measured: a finding local error cannot speak for diverges (``dump``); an
       output out of a tolerance that stands on a bound of its own (:attr:`OutputTolerance.measured`:
       twice what correct arithmetic reaches, or the user's) diverges (``output``: the error
       accumulates beyond it); otherwise ok, even with the outputs past the band: every operator
       is within its bound, so what the outputs show is rounding accumulated through the graph.
    3. Without local error: the dumps decide (``findings``).
    """
    w = tol.words(err)
    if local_roots:
        rule, bad = "local", True
    elif err is not None and not math.isfinite(err):
        rule, bad = "output", True
    elif local_measured:
        rule, bad = ("dump", True) if findings else ("output", True) if tol.measured and not tol.holds(err) else (
            "local", False)
    else:
        rule, bad = "dump", findings
    if err is None:
        return RunVerdict("diverges" if bad else "ok", rule, f"{w}: not compared")
    if tol.holds(err):
        return RunVerdict("diverges" if bad else "ok", rule, f"{w}: within")
    if bad:
        return RunVerdict("diverges", rule, f"{w}: out of tolerance")
    why = ("every operator's local error is within its bound: rounding accumulated through the graph, "
           "not a divergence" if local_measured else
           "the dump comparison holds each var to its own threshold and finds none past it (local error not measured)")
    return RunVerdict("ok", rule, f"{w}: above it, but {why}")
