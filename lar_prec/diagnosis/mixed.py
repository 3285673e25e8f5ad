"""A mixed-precision model from the caller's side: the rewrite (:mod:`lar_prec.lar.mixed_rewrite`)
run in a child process, and the share of the model's compute left in float16. Numpy-free."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

from lar_prec.diagnosis.graphinfo import macs
from lar_prec.diagnosis.local import child_env, run_child
from lar_prec.errors import RunError, UsageError
from lar_prec.lar.mixed_rewrite import MODES, SHAPE_READERS, USAGE_EXIT, KeepList, MixedModel
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import PathLike
from lar_prec.inputspec import read_json_file


@dataclass(frozen=True)
class ComputeFraction:
    """How much of a model runs in float16: MACs of convolutions and matrix products, and
    float operators (those reading or writing a float var; shape-only operators left out)."""

    macs_total: int
    macs_float16: int
    oprs_total: int
    oprs_float16: int

    @property
    def macs(self) -> Optional[float]:
        return self.macs_float16 / self.macs_total if self.macs_total else None

    @property
    def oprs(self) -> Optional[float]:
        return self.oprs_float16 / self.oprs_total if self.oprs_total else None

    def to_json(self) -> Dict[str, Any]:
        return {"macs_total": self.macs_total, "macs_float16": self.macs_float16, "macs_fraction": self.macs,
                "oprs_total": self.oprs_total, "oprs_float16": self.oprs_float16, "oprs_fraction": self.oprs}


def float_operators(graph: Any, keep: KeepList) -> Iterator[Tuple[Any, bool]]:
    """Every float operator of ``graph`` (a :class:`lar_prec.diagnosis.graphinfo.GraphInfo` of
    the plain model: reading or writing a float var, shape-only readers left out) and whether
    ``keep`` keeps it in float32. Numpy-free."""
    for opr in graph.computing():
        if opr.type in SHAPE_READERS:
            continue
        if not any(graph.vars[i].is_float for i in opr.inputs + opr.outputs):
            continue
        yield opr, keep.why(opr.type, opr.name, (graph.vars[i].name for i in opr.outputs), opr.outputs) is not None


def fp16_fraction(graph: Any, keep: KeepList) -> ComputeFraction:
    """The share of ``graph`` (see :func:`float_operators`) that runs in float16 when ``keep``
    stays in float32. Numpy-free."""
    mt = m16 = ot = o16 = 0
    for opr, kept in float_operators(graph, keep):
        m = macs(graph, opr)
        mt += m
        ot += 1
        if not kept:
            m16 += m
            o16 += 1
    return ComputeFraction(mt, m16, ot, o16)


def write_mixed_model(model: PathLike, out: PathLike, keep: KeepList, mode: str = "ioc16", *,
                      timeout: Optional[float] = 600.0) -> MixedModel:
    """:func:`rewrite_mixed` in a child process (MegEngine stays out of the caller); the
    keep-list and the record go beside ``out`` (``<out>.keep.json``, ``<out>.json``) with the
    child's output (``<out>.log/``).

    Raises:
        UsageError (exit 2): bad arguments or keep-list; RunError (exit 3): the rewrite failed.
    """
    if mode not in MODES:
        raise UsageError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    dst = Path(out)
    keep_file = dst.with_name(dst.name + ".keep.json")
    record = dst.with_name(dst.name + ".json")
    atomic_write_text(keep_file, json_text(keep.to_json()), what="keep-list")
    argv = [sys.executable, "-m", "lar_prec.lar.mixed_rewrite", str(model), str(dst), "--keep", str(keep_file),
            "--mode", mode, "--record", str(record)]
    try:
        run_child(argv, child_env(), timeout, f"writing the mixed-precision model of {model}",
                  dst.with_name(dst.name + ".log"))
    except RunError as exc:
        if exc.returncode == USAGE_EXIT:  # the child's UsageError: bad model path or keep-list entry
            lines = [ln for ln in exc.stderr_tail.splitlines() if ln.startswith("mixed_rewrite: error: ")]
            raise UsageError(lines[-1][len("mixed_rewrite: error: "):] if lines else str(exc)) from None
        raise
    data = read_json_file(record, "mixed-model record")
    return MixedModel.from_json(data, str(record))
