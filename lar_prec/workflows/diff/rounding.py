"""The third tier of a diff: **within rounding**. Two sides that differ by more than their
jitter may both be correct: kernels that sum in another order (another layout, another thread
split, another build's algorithm) give other roundings of the same exact result. So each side
is measured against the **naive reference** (the plain model under MegEngine's reference
kernels) by local error, as ``sweep`` measures an option: the layerwise model is built once
from the plain model and the reference's dump, fed the reference's values, and run under each
side's setting (its build, device, flags, environment; a layout or float16 option rewrites it
as it rewrites the model). Each operator then carries the local verdict of
:func:`lar_prec.diagnosis.floors.local_roots` on each side.

A variable outside jitter is **within rounding** when, on both sides, its operator is within
its bound of the naive reference (:func:`within_bound`: the one place that verdict is read)
and no variable it depends on is outside (else it carries an upstream change: outside too).
Otherwise it stays **outside**: a precision change. A variable whose operator local error could
not measure on a side (no layerwise output under that side's rewrite, a constant, a model
input) cannot be shown within rounding: it stays outside. A variable of A with no partner in B
(a convolution B fused into its ReLU) is not compared, but its operator is still held to its
bound on both sides on the way: a fault there is not hidden behind the fusion.

Numpy only here: the naive run, the build and the layerwise runs are child processes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np
from lar_prec.diagnosis.floors import local_json, local_roots, noise_floors
from lar_prec.diagnosis.local import DEFAULT_TIMEOUT, build_layerwise, compute_dtype, feed_inputs, local_errors
from lar_prec.diagnosis.local_records import LayerwiseModel
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.keys import dump_keys
from lar_prec.errors import AnalysisInterrupted, LarPrecError
from lar_prec.opkey import match_keys
from lar_prec.outputs import atomic_write_text, json_text
from lar_prec.records import json_number
from lar_prec.run.config import RunConfig, get_config
from lar_prec.run.inputs import PreparedInputs
from lar_prec.run.once import run_once
from lar_prec.workflows.common.analysis import reference_flags
from lar_prec.workflows.devices.devices import same_vars

#: local verdicts (:func:`lar_prec.diagnosis.floors.local_roots`) of an operator within its
#: bound: no local error above its floor. ``inherited``: its own error is within the floor,
#: what it carries came from upstream (a diff judges upstream by its own variables)
WITHIN_BOUND = frozenset({"clean", "noise", "inherited", "constant"})


def within_bound(label: Optional[str], local_err: Optional[float]) -> bool:
    """Whether one side's operator is within its bound of the naive reference: its local
    verdict says so and its local error was measured (finite). The only reader of the label
    for ``diff`` and ``bisect``: the bound rules themselves live in :mod:`lar_prec.diagnosis.floors`."""
    if label == "constant":
        return True
    return label in WITHIN_BOUND and local_err is not None and math.isfinite(local_err)


@dataclass(frozen=True)
class Reference:
    """The naive reference run of the plain model and the layerwise model built from it, with
    its feeds (the reference's values): shared by every side measured against it."""

    model: Path
    dump: Path
    layerwise: LayerwiseModel
    feeds: PreparedInputs
    dir: Path
    run: Any  # its RunResult

    def to_json(self) -> Dict[str, Any]:
        return {"dir": str(self.dir), "dump": str(self.dump), "layerwise_model": str(self.layerwise.path),
                "config": "naive, plain graph"}


@dataclass(frozen=True)
class SideBound:
    """One side's operators against the naive reference: each measured var's (layerwise id)
    local error, floor and label; ``measured`` False with ``why`` when the layerwise run failed."""

    name: str
    measured: bool
    why: Optional[str] = None
    labels: Mapping[int, str] = field(default_factory=dict)
    local_err: Mapping[int, Optional[float]] = field(default_factory=dict)
    floors: Mapping[int, float] = field(default_factory=dict)
    roots: Tuple[Tuple[int, str], ...] = ()
    dir: Optional[Path] = None
    runs: int = 0

    def ok(self, m: Optional[int]) -> bool:
        return m is not None and within_bound(self.labels.get(m), self.local_err.get(m))

    def row(self, m: Optional[int]) -> Optional[Dict[str, Any]]:
        if m is None or m not in self.labels:
            return None
        return {"label": self.labels[m], "local_err": json_number(self.local_err.get(m)),
                "floor": json_number(self.floors.get(m)), "within_bound": self.ok(m)}

    def to_json(self) -> Dict[str, Any]:
        return {"measured": self.measured, "why": self.why, "dir": None if self.dir is None else str(self.dir),
                "roots": [{"id": i, "name": n} for i, n in self.roots]}


def naive_reference(model: Path, prepared: PreparedInputs, out: Path, *, lar: Any, extra_flags: Sequence[str],
                    timeout: Optional[float]) -> Reference:
    """Run the plain model once under the naive configuration (``lar``: a local build; the
    shared flags without the algorithm-choice ones) into ``out/naive``, build the layerwise
    model from it and write its feeds.

    Raises:
        LarPrecError: the run or the build failed (the caller says rounding is not judged).
    """
    kept, _dropped = reference_flags(extra_flags)
    rec = run_once(model, prepared, "naive", out, lar=lar, timeout=timeout, extra_flags=kept, label="naive")
    dump = Path(str(rec.dump_dir))
    lw = build_layerwise(model, dump, out / "layerwise", timeout=timeout or DEFAULT_TIMEOUT)
    feeds = feed_inputs(lw, DumpFolder(dump), out / "inputs-ref")
    return Reference(Path(model), dump, lw, feeds, out, rec)


def measure_side(ref: Reference, name: str, side_dump: Optional[Path], cfg: RunConfig, out: Path, *, lar: Any = None,
                 remote: Any = None, timeout: Optional[float] = None) -> SideBound:
    """One side's local error against the reference under ``cfg`` (where the side ran: ``lar``
    or ``remote``), labelled with the floors of the arithmetic its flags impose. Never raises
    for a failed layerwise run: ``measured`` False and why."""
    try:
        result = local_errors(ref.model, ref.dump, cfg, out_dir=out, test_dump=side_dump,
                              layerwise=ref.layerwise, ref_feeds=ref.feeds, checks=False,
                              timeout=timeout or DEFAULT_TIMEOUT, lar=lar, remote=remote, record=False)
    except AnalysisInterrupted:
        raise
    except LarPrecError as exc:
        return SideBound(name, False, f"side {name.upper()}'s layerwise run failed: {' '.join(str(exc).split())[:300]}",
                         dir=out)
    floors = noise_floors(result, compute_dtype(get_config(cfg).flags))
    verdict = local_roots(result, floors)
    atomic_write_text(out / "local.json", json_text(local_json(result, verdict)), what="local error record")
    return SideBound(name, True, None, dict(verdict.labels), {v.id: v.local_err for v in result.vars}, dict(floors),
                     tuple((r.id, r.name) for r in verdict.roots), out, len(result.runs))


def to_reference_ids(a_dump: Path, ref: Reference) -> Dict[int, int]:
    """A's var id -> the layerwise model's var id (by id when A ran the reference's graph, else
    by the stable operator key)."""
    fa, fr = DumpFolder(a_dump), DumpFolder(ref.dump)
    if same_vars(fa, fr):
        a_to_ref = {i: i for i in fa.ids}
    else:
        a_to_ref = {y: x for x, y, _ in match_keys(dump_keys(ref.dump), dump_keys(a_dump)).pairs}
    by_ref = {m.ref_id: m.id for m in ref.layerwise.measured if m.ref_id is not None}
    return {a: by_ref[r] for a, r in a_to_ref.items() if r in by_ref}


@dataclass(frozen=True)
class Rounding:
    """What the rounding tier found: the reference, each side's bounds, per A var the layerwise
    var it was judged by (``to_lw``), and the vars found within rounding."""

    reference: Optional[Reference]
    a: Optional[SideBound]
    b: Optional[SideBound]
    to_lw: Mapping[int, int]
    within: Tuple[int, ...]
    why: Optional[str] = None
    #: constants within rounding: one side's are the other's rounded to the dtype it computes in
    rounded: Tuple[int, ...] = ()

    @property
    def measured(self) -> bool:
        return bool(self.a is not None and self.b is not None and self.a.measured and self.b.measured)

    def var_json(self, vid: int) -> Optional[Dict[str, Any]]:
        """``rounding`` of one variable: each side's label, local error and floor."""
        if not self.measured or vid not in self.to_lw:
            return None
        m = self.to_lw[vid]
        return {"a": self.a.row(m), "b": self.b.row(m)}  # type: ignore[union-attr]

    def note(self, vid: int) -> str:
        """Why a var is within rounding (the tree's note of it)."""
        if vid in self.rounded:
            return "within rounding: the constant as the other side's rounded to the dtype it computes in"
        return "within rounding: each side within its operator's bound of the naive reference"

    def to_json(self) -> Dict[str, Any]:
        return {"measured": self.measured, "why": self.why,
                "reference": self.reference.to_json() if self.reference is not None else None,
                "a": self.a.to_json() if self.a is not None else None,
                "b": self.b.to_json() if self.b is not None else None, "within": len(self.within),
                "rounded_constants": len(self.rounded)}


def not_judged(why: str) -> Rounding:
    return Rounding(None, None, None, {}, (), why)


def within_rounding(verdicts: Mapping[int, str], inputs: Mapping[int, Sequence[int]], to_lw: Mapping[int, int],
                    a: SideBound, b: SideBound, outside: str, differs: Sequence[str]) -> List[int]:
    """The vars judged ``outside`` (numbers that differ: ``verdicts`` by A id) that are within
    rounding: both sides' operators within their bounds, and nothing they depend on still
    outside or another difference (``differs``), nor, among the vars not compared on the way,
    an operator out of its bound on either side."""
    final: Dict[int, bool] = {}  # var -> it is (or carries) a change

    def own(vid: int, up: bool) -> bool:
        v = verdicts.get(vid)
        if v is None:  # not compared (no partner: fused away on one side): its own operator still counts
            m = to_lw.get(vid)
            return up or (m is not None and not (a.ok(m) and b.ok(m)))
        if v == outside:
            return up or not (a.ok(to_lw.get(vid)) and b.ok(to_lw.get(vid)))
        return v in differs

    def changed(start: int) -> bool:
        # inputs first, without recursion (a transformer has thousands of vars in a row)
        stack: List[Tuple[int, bool]] = [(start, False)]
        on_path = set()
        while stack:
            vid, expanded = stack.pop()
            if vid in final:
                continue
            ups = [u for u in inputs.get(vid, ()) if u != vid and u not in on_path]
            if not expanded:
                on_path.add(vid)
                stack.append((vid, True))
                stack.extend((u, False) for u in ups if u not in final)
                continue
            on_path.discard(vid)
            final[vid] = own(vid, any(final.get(u, False) for u in ups))
        return final[start]

    return [vid for vid, v in verdicts.items() if v == outside and not changed(vid)]


def judge_rounding(j: Any, ref: Reference, a: SideBound, b: SideBound, *, outside: str,
                   differs: Sequence[str], dtypes: Sequence[Optional[str]] = (None, None)) -> Rounding:
    """The vars of a judgement (:class:`lar_prec.workflows.diff.judge.Judged`) within rounding
    (``dtypes``: the dtype each side computes in, None: its own: :func:`rounded_constants`)."""
    if not (a.measured and b.measured):
        why = a.why if not a.measured else b.why
        return Rounding(ref, a, b, {}, (), f"rounding not judged: {why}")
    to_lw = to_reference_ids(j.a_dump, ref)
    folder = DumpFolder(j.a_dump)
    inputs = {i: tuple(folder[i].input_ids) for i in folder.ids}
    status = {d.id: d.status for d in j.tree.diffs}
    # only a numeric difference can be rounding: another shape, dtype or a missing var is not
    verdicts = {i: (v if v != outside or status.get(i) == "divergent" else "other") for i, v in j.verdicts.items()}
    rounded = rounded_constants(j, [i for i, v in verdicts.items() if v == outside and not inputs.get(i)], dtypes)
    verdicts.update({i: "constant_rounded" for i in rounded})
    ok = within_rounding(verdicts, inputs, to_lw, a, b, outside, tuple(differs) + ("other",))
    return Rounding(ref, a, b, to_lw, tuple(ok) + tuple(rounded), rounded=tuple(rounded))


def rounded_constants(j: Any, ids: Sequence[int], dtypes: Sequence[Optional[str]]) -> List[int]:
    """Constants (vars without inputs) one side holds as the other's rounded to the dtype that
    side computes in (``dtypes``: A's, B's; ``float16`` under ``--enable-ioc16`` or
    ``--enable-io16xc32``, which store the weights in float16), each value one of the two of
    that dtype around the other's: the option's own rounding, not a weight changed."""
    if not any(dtypes) or not ids:
        return []
    fa, fb = DumpFolder(j.dirs[0]), DumpFolder(j.dirs[1])
    out = []
    for vid in ids:
        if vid not in fa or vid not in fb:
            continue
        va, vb = np.asarray(fa[vid].array()), np.asarray(fb[vid].array())
        if va.shape != vb.shape or va.dtype.kind != "f" or vb.dtype.kind != "f":
            continue
        if (dtypes[1] and _faithful(va, vb, dtypes[1])) or (dtypes[0] and _faithful(vb, va, dtypes[0])):
            out.append(vid)
    return out


def _faithful(x: "np.ndarray", y: "np.ndarray", dtype: str) -> bool:
    """Every value of ``y`` is ``x`` rounded to ``dtype`` (one of the two values of ``dtype``
    around it: a conversion may round a tie either way), NaN where ``x`` is NaN."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    if not np.array_equal(y.astype(dtype).astype(np.float64), y64, equal_nan=True):
        return False  # not a value of dtype
    near = x.astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        step = np.spacing(np.abs(near)).astype(np.float64)
        ok = (np.abs(y64 - x64) < step) | (y64 == x64) | (np.isnan(x64) & np.isnan(y64))
    return bool(np.all(ok))


def side_config(config: str, extra_flags: Sequence[str], side: Any) -> RunConfig:
    """The configuration a side ran under (shared flags, then its own; its environment)."""
    return get_config(config).with_extra(tuple(extra_flags) + tuple(side.flags), dict(side.env))


__all__ = ["Reference", "Rounding", "SideBound", "WITHIN_BOUND", "judge_rounding", "measure_side", "naive_reference",
           "not_judged", "side_config", "to_reference_ids", "within_bound", "within_rounding"]
