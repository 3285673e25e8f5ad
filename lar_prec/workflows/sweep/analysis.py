"""The analysis half of a sweep: one option's dump against the reference's (numpy only).

A sweep (:mod:`lar_prec.workflows.sweep.sweep`) compares dumps of *different* graphs: the reference ran the
plain model, an option ran a rewritten one (new var ids, maybe NCHWx layouts, fp16 copies,
fused operators). Pairing, relayout, the fp16 widening and the metric are the comparison
engine's (:func:`lar_prec.compare.folders.compare_folders`, what ``lar-prec compare --pair name``
runs); here only what a sweep adds on top:

* :func:`cross_graph`: the computed vars paired by name, each with its tolerance (wider for a
  float16 var of the reference), and the **root** in side B's graph: the first var over the
  tolerance whose nearest compared ancestors (walking through vars that have no partner, such as
  a fused ConvBias's inputs or a layout conversion) are all within it; the model outputs' error.
* :func:`same_graph`: the same for two runs of one graph (pair by id).
* :func:`compare_pair`: one pair of dumps (the layerwise runs of local error), relaid out.

Both return a frozen :class:`GraphDiff`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lar_prec.compare.folders import compare_folders
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import DumpFolderError, LarPrecError
from lar_prec.run.record import RunResult
from lar_prec.workflows.shake.algos import verbose_algorithms
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.compare.namepair import pair_by_name, skip_reason
from lar_prec.compare.relayout import to_plain
from lar_prec.compare.threshold import band

from lar_prec.graph import reach
from lar_prec.records import PathLike  # noqa: E402
from lar_prec.lar.graphopts import formats_beside_dump

#: reference vars of these dtypes carry 16-bit rounding whatever the option: their tolerance
#: is at least their own dtype's band (that of compare.tolerance for float16 outputs)
HALF_DTYPES = frozenset({"Float16", "BFloat16"})


@dataclass(frozen=True)
class VarErr:
    """One paired var: ``a``/``b`` ids (reference side, option side), its name on side A,
    the operator type on side B, ``max_err`` (None when not compared: ``note`` says why)."""

    a: int
    b: int
    name: str
    opr_type: str
    max_err: Optional[float]
    note: str = ""
    tol: float = 0.0  # this var's tolerance (wider for a float16 var of the reference)

    @property
    def over(self) -> bool:
        return self.max_err is not None and self.max_err > self.tol


@dataclass(frozen=True)
class GraphDiff:
    """Side A against side B.

    ``errs`` in B's execution order; ``output_err`` is the largest ``max_err`` over A's outputs
    (computed vars nothing consumes) that paired; ``root`` the var (a ``VarErr``) where
    divergence above ``tol`` starts in B's graph, or None; ``unpaired_a``/``unpaired_b`` are
    ``(id, name, reason)`` of computed vars without partner.
    """

    errs: Tuple[VarErr, ...]
    tol: float
    output_err: Optional[float]
    outputs_paired: int
    outputs_total: int
    root: Optional[VarErr]
    unpaired_a: Tuple[Tuple[int, str, str], ...]
    unpaired_b: Tuple[Tuple[int, str, str], ...]
    n_computed_a: int

    @property
    def n_paired(self) -> int:
        return len(self.errs)

    @property
    def worst(self) -> Optional[float]:
        vals = [e.max_err for e in self.errs if e.max_err is not None]
        return max(vals) if vals else None

    @property
    def diverges(self) -> bool:
        return any(e.over for e in self.errs)

    def by_a(self) -> Dict[int, VarErr]:
        return {e.a: e for e in self.errs}


#: MegEngine's metric over two whole tensors (one definition, in lar_prec.compare.metrics)
max_err = max_megengine_err


def model_outputs(folder: DumpFolder) -> List[int]:
    """Computed vars of ``folder`` that no var consumes (the model's outputs)."""
    consumed = set()
    computed = []
    for d in folder:
        consumed.update(d.input_ids)
        if not skip_reason(d.var):
            computed.append(d.id)
    return [i for i in computed if i not in consumed]


@lru_cache(maxsize=8)
def _formats(dump_dir: str) -> Mapping[str, str]:

    return formats_beside_dump(dump_dir)


def compare_pair(da: Any, db: Any, fmt: Optional[str], db_dir: Path) -> Tuple[Optional[float], str]:
    va, vb = da.var, db.var
    try:
        a, b = da.array(), db.array()
    except Exception as exc:  # noqa: BLE001 (a dtype numpy cannot decode: say so, keep going)
        return None, f"not decodable: {exc}"
    if tuple(a.shape) != tuple(b.shape):
        plain, det = to_plain(b, a.shape, fmt=fmt, layout=vb.layout)
        if det.kind == "ambiguous" and fmt is None:  # e.g. --layout-transform: ask the model it kept
            plain, det = to_plain(b, a.shape, fmt=_formats(str(db_dir)).get(vb.name), layout=vb.layout)
        if plain is None:
            return None, f"layout: {det.reason or det.kind}"
        b = plain
    if a.dtype != b.dtype and (a.dtype.kind not in "fc" or b.dtype.kind not in "fc"):
        return None, f"dtype {va.dtype} vs {vb.dtype}"
    return max_err(a, b), ""


def _root(errs: Sequence[VarErr], folder_b: DumpFolder, tol: float) -> Optional[VarErr]:
    """The first var over its tolerance (B's execution order) whose nearest compared ancestors
    in B's graph are all within theirs; None when nothing is over."""
    by_b = {e.b: e for e in errs}
    inputs = {v: folder_b.inputs_of(v) for v in folder_b.ids}

    def compared(i: int) -> bool:
        return i in by_b and by_b[i].max_err is not None

    for e in errs:
        if e.over and not any(by_b[i].over for i in reach(e.b, inputs, stop=compared) if compared(i)):
            return e
    return None


def _errs(cmp: Any, fa: DumpFolder, fb: DumpFolder, tol: float,
          var_tol: Optional[Mapping[str, float]] = None) -> List[VarErr]:
    """The computed vars of a :class:`~lar_prec.compare.records.Comparison` as VarErrs in B's
    execution order: MegEngine's ``max_err`` (inf for NaN/Inf on one side only, as
    :func:`max_err` of the whole tensors), None with the reason where values were not compared;
    each held to ``var_tol[name]`` where given, else ``tol``."""
    b_of = dict(cmp.pairs)
    order_b = {i: k for k, i in enumerate(fb.ids)}
    errs = []
    for d in cmp.diffs:
        b = b_of.get(d.id)
        if b is None or skip_reason(fa[d.id].var):
            continue
        if d.status == "nonfinite":
            err, note = math.inf, ""
        elif d.max_err is None or d.status in ("shape_mismatch", "dtype_mismatch"):
            err = None
            note = d.note or (f"dtype {d.dtype} vs {d.dtype_b}" if d.dtype_b else f"shape {d.shape} vs {d.shape_b}")
        else:
            err, note = d.max_err, ""
        own = var_tol.get(d.name, tol) if var_tol else tol
        tol_v = max(own, band(d.dtype)[1]) if d.dtype in HALF_DTYPES else own
        errs.append(VarErr(d.id, b, d.name, fb[b].var.opr_type, err, note, tol_v))
    errs.sort(key=lambda e: order_b.get(e.b, 0))
    return errs


def _diff(fa: DumpFolder, fb: DumpFolder, errs: List[VarErr], tol: float,
          unpaired_a: Sequence[Tuple[int, str, str]], unpaired_b: Sequence[Tuple[int, str, str]],
          n_computed_a: int) -> GraphDiff:
    outs = model_outputs(fa)
    by_a = {e.a: e for e in errs}
    out_errs = [by_a[o].max_err for o in outs if o in by_a and by_a[o].max_err is not None]
    return GraphDiff(tuple(errs), tol, max(out_errs) if out_errs else None, len(out_errs), len(outs),
                     _root(errs, fb, tol), tuple(unpaired_a), tuple(unpaired_b), n_computed_a)


def _compare(dir_a: PathLike, dir_b: PathLike, tol: float, pairing: str, fmt: Optional[str]) -> Any:
    """Both folders through the one comparison engine (:func:`compare_folders`, as ``lar-prec
    compare --pair``): pairing, relayout, fp16 widening and the metric are its own."""
    try:
        return compare_folders(dir_a, dir_b, threshold=tol, pairing=pairing, layout_format=fmt, jobs=1)
    except DumpFolderError as exc:
        if "in common" not in str(exc) and f"no binary dump files in {Path(dir_b)}" not in str(exc):
            raise
        return None  # nothing pairs (B dumped nothing): every computed var of A is unpaired


def cross_graph(dir_a: PathLike, dir_b: PathLike, tol: float, *, fmt: Optional[str] = None,
                var_tol: Optional[Mapping[str, float]] = None) -> GraphDiff:
    """Reference dump ``dir_a`` (plain graph) against ``dir_b`` (a rewritten graph), by name;
    each var held to ``tol``, or to ``var_tol[its name]`` where given.

    ``fmt`` is the operator format the option asked for (``NCHW44``, ...): it settles the
    shapes that fit two layouts ((1,8,8,8,4) is NCHW4 or NHWCD4) without loading the
    rewritten model (MegEngine's import alone would cost more than the whole comparison)."""
    fa, fb = DumpFolder(dir_a), DumpFolder(dir_b)
    cmp = _compare(dir_a, dir_b, tol, "name", fmt)
    if cmp is None:
        p = pair_by_name([d.var for d in fa], [d.var for d in fb])
        return _diff(fa, fb, [], tol, [(u.id, u.name, u.reason) for u in p.unpaired_a],
                     [(u.id, u.name, u.reason) for u in p.unpaired_b], len(p.unpaired_a))
    errs = _errs(cmp, fa, fb, tol, var_tol)
    left = {"a": fa, "b": fb}
    unpaired = {side: [(i, n, r) for sd, i, n, r in cmp.unpaired
                       if sd == side and not skip_reason(left[side].var_info(i))] for side in left}
    return _diff(fa, fb, errs, tol, unpaired["a"], unpaired["b"], len(errs) + len(unpaired["a"]))


def same_graph(dir_a: PathLike, dir_b: PathLike, tol: float) -> GraphDiff:
    """Two runs of the same graph (e.g. naive and default kernels under one option), by id."""
    fa, fb = DumpFolder(dir_a), DumpFolder(dir_b)
    cmp = _compare(dir_a, dir_b, tol, "id", None)
    errs = _errs(cmp, fa, fb, tol) if cmp is not None else []
    ids_b = set(fb.ids)
    only_a = [(d.id, d.var.name, "not dumped in B") for d in fa if not skip_reason(d.var) and d.id not in ids_b]
    return _diff(fa, fb, errs, tol, only_a, (), len(errs) + len(only_a))


def run_algorithms(rec: RunResult) -> Tuple[Tuple[str, str], ...]:
    """(var name, algorithm) of each operator a run's ``--verbose`` log names (empty when the run
    logged none: a fast-run run, a binary that does not log them)."""
    try:
        text = (rec.dir / "stderr.txt").read_text(encoding="utf-8", errors="replace")
        found = verbose_algorithms(text, Path(rec.dump_dir)) if rec.dump_dir is not None else {}
        folder = DumpFolder(rec.dump_dir)  # type: ignore[arg-type]
        return tuple((folder.var_info(vid).name, algo) for vid, algo in sorted(found.items()))
    except (OSError, LarPrecError):
        return ()
