"""The analysis half of a sweep: one option's dump against the reference's (numpy only).

A sweep (:mod:`lar_prec.workflows.sweep`) compares dumps of *different* graphs: the reference ran the
plain model, an option ran a rewritten one (new var ids, maybe NCHWx layouts, fp16 copies,
fused operators). Here:

* :func:`cross_graph`: pair by name (:func:`lar_prec.namepair.pair_by_name`), bring each
  tensor of side B back to the plain layout (:func:`lar_prec.relayout.to_plain`), measure
  MegEngine's ``max_err`` per pair, and find the **root** in side B's graph: the first var over
  the tolerance whose nearest compared ancestors (walking through vars that have no partner,
  such as a fused ConvBias's inputs or a layout conversion) are all within it.
* :func:`same_graph`: the same for two runs of one graph (pair by id, no relayout).

Both return a frozen :class:`GraphDiff`. Reading is lazy and each var is read once per side.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.compare.namepair import pair_by_name, skip_reason
from lar_prec.compare.relayout import to_plain

from lar_prec.records import PathLike  # noqa: E402
from lar_prec.lar.graphopts import formats_beside_dump

#: reference vars of these dtypes carry float16 rounding whatever the option: their
#: tolerance is at least TOL_HALF (the sweep's fp16 tolerance)
HALF_DTYPES = frozenset({"Float16", "BFloat16"})
TOL_HALF = 1e-2


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


def _outputs(folder: DumpFolder) -> List[int]:
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
    """The first var over ``tol`` (B's execution order) whose nearest compared ancestors in
    B's graph are all within it; None when nothing is over."""
    by_b = {e.b: e for e in errs}
    for e in errs:
        if not e.over:
            continue
        seen = set()
        stack = list(folder_b.inputs_of(e.b))
        clean = True
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            anc = by_b.get(i)
            if anc is not None and anc.max_err is not None:
                if anc.over:
                    clean = False
                    break
                continue
            if i in folder_b:
                stack.extend(folder_b.inputs_of(i))
        if clean:
            return e
    return None


def _diff(fa: DumpFolder, fb: DumpFolder, pairs: Iterable[Tuple[int, int, str]], tol: float,
          unpaired_a: Sequence[Tuple[int, str, str]], unpaired_b: Sequence[Tuple[int, str, str]],
          n_computed_a: int, fmt: Optional[str] = None) -> GraphDiff:
    order_b = {i: k for k, i in enumerate(fb.ids)}
    errs = []
    for a, b, name in pairs:
        err, note = compare_pair(fa[a], fb[b], fmt, fb.path)
        tol_v = max(tol, TOL_HALF) if fa[a].var.dtype in HALF_DTYPES else tol
        errs.append(VarErr(a, b, name, fb[b].var.opr_type, err, note, tol_v))
    errs.sort(key=lambda e: order_b.get(e.b, 0))
    outs = _outputs(fa)
    by_a = {e.a: e for e in errs}
    out_errs = [by_a[o].max_err for o in outs if o in by_a and by_a[o].max_err is not None]
    return GraphDiff(tuple(errs), tol, max(out_errs) if out_errs else None, len(out_errs), len(outs),
                     _root(errs, fb, tol), tuple(unpaired_a), tuple(unpaired_b), n_computed_a)


def cross_graph(dir_a: PathLike, dir_b: PathLike, tol: float, *, fmt: Optional[str] = None) -> GraphDiff:
    """Reference dump ``dir_a`` (plain graph) against ``dir_b`` (a rewritten graph), by name.

    ``fmt`` is the operator format the option asked for (``NCHW44``, ...): it settles the
    shapes that fit two layouts ((1,8,8,8,4) is NCHW4 or NHWCD4) without loading the
    rewritten model (MegEngine's import alone would cost more than the whole comparison)."""
    fa, fb = DumpFolder(dir_a), DumpFolder(dir_b)
    p = pair_by_name([d.var for d in fa], [d.var for d in fb])
    return _diff(fa, fb, [(x.a, x.b, x.name_a) for x in p.pairs], tol,
                 [(u.id, u.name, u.reason) for u in p.unpaired_a],
                 [(u.id, u.name, u.reason) for u in p.unpaired_b], len(p.pairs) + len(p.unpaired_a), fmt)


def same_graph(dir_a: PathLike, dir_b: PathLike, tol: float) -> GraphDiff:
    """Two runs of the same graph (e.g. naive and default kernels under one option), by id."""
    fa, fb = DumpFolder(dir_a), DumpFolder(dir_b)
    ids_b = set(fb.ids)
    pairs, only_a = [], []
    n = 0
    for d in fa:
        if skip_reason(d.var):
            continue
        n += 1
        if d.id in ids_b:
            pairs.append((d.id, d.id, d.var.name))
        else:
            only_a.append((d.id, d.var.name, "not dumped in B"))
    return _diff(fa, fb, pairs, tol, only_a, (), n)
