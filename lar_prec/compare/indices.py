"""Index outputs compared by what they index (issue 40 #2; docs/json.md, status ``index_equivalent``).

TopK, ArgSort, ArgMax and ArgMin return positions in their values input. Where values tie (or
differ by less than rounding), another kernel may legally return another position: the
indices differ, the answer does not. So an integer output of such an operator that differs is
compared by the values it indexes: each side's indices gathered from that side's values input
(along the axis the shapes tell), held to the values input's own threshold. Equal there: the
var is ``index_equivalent`` (not a divergence: exit code 0), with a note; not equal: it stays
``divergent``, the note says how many indexed values differ. A data-movement var (reshape,
axis removal, copy, ...) of integers that differs only because it carries such indices, its
inputs all agreeing, is ``index_equivalent`` too: it computes nothing.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)
from lar_prec.compare.growth import DATA_MOVEMENT
from lar_prec.compare.metrics import megengine_err
from lar_prec.compare.records import AGREEING, INDEX_EQUIVALENT
from lar_prec.compare.threshold import float_name, to_float32
from lar_prec.dumps.folder import DumpFolder

#: operators whose integer output holds positions in their first input
INDEX_TYPES = frozenset({"TopK", "ArgsortForward", "Argmax", "Argmin"})


def _axis(idx_shape: Tuple[int, ...], val_shape: Tuple[int, ...]) -> Optional[int]:
    """The axis indices run along: the one dimension where the shapes differ (TopK's k, an
    ArgMax's kept 1), the last one when they are equal (ArgSort); None when it cannot be told."""
    if len(idx_shape) != len(val_shape) or not idx_shape:
        return None
    differ = [k for k, (i, v) in enumerate(zip(idx_shape, val_shape)) if i != v]
    if not differ:
        return len(idx_shape) - 1
    return differ[0] if len(differ) == 1 else None


def indexed_values(idx: "np.ndarray", values: "np.ndarray") -> Optional["np.ndarray"]:
    """``values`` gathered at ``idx`` along the axis the shapes tell; None when they do not
    fit (another layout, an index out of range)."""
    axis = _axis(tuple(idx.shape), tuple(values.shape))
    if axis is None:
        return None
    i = idx.astype(np.int64)
    if i.size and (i.min() < 0 or i.max() >= values.shape[axis]):
        return None
    return np.take_along_axis(values, i, axis=axis)


def judge_indices(diffs: List[object], fa: DumpFolder, fb: DumpFolder, b_ids: Optional[Dict[int, int]] = None,
                  at: Optional[Sequence[int]] = None) -> None:
    """Re-judge, in place (records this comparison made, not yet shared), the divergent integer
    outputs of :data:`INDEX_TYPES` by the values they index, and the integer data movement
    that only carries them. ``b_ids``: B's id of each A id when they differ (paired by name).
    ``at``: the positions in ``diffs`` of every var of those types, where the caller knows them
    (no pass over tens of thousands of records)."""
    candidates = diffs if at is None else [diffs[i] for i in at]
    index_vars = [d for d in candidates if d.opr_type in INDEX_TYPES and d.status == "divergent"]  # type: ignore[attr-defined]
    if not index_vars:
        return  # the usual case: nothing to look at (one pass, no dict)
    b_of = (lambda v: b_ids.get(v, v)) if b_ids else (lambda v: v)  # noqa: E731
    by_id: Dict[int, object] = {}  # made only if an input is not found near its index output
    for d in index_vars:
        if float_name(d.dtype) is False and d.inputs:  # type: ignore[attr-defined]
            _judge_index(d, _input_near(diffs, d, d.inputs[0], by_id), fa, fb, b_of)  # type: ignore[attr-defined]
    if not any(d.status == INDEX_EQUIVALENT for d in index_vars):  # type: ignore[attr-defined]
        return
    by_id = by_id or {d.id: d for d in diffs}  # type: ignore[attr-defined]
    for d in diffs:  # in execution order: what carries such indices carries them on
        if d.status != "divergent" or d.opr_type not in DATA_MOVEMENT or float_name(d.dtype) is not False:  # type: ignore[attr-defined]
            continue
        ins = [by_id[u] for u in d.inputs if u in by_id]  # type: ignore[attr-defined]
        carried = [u for u in ins if u.status == INDEX_EQUIVALENT]
        if carried and all(u.status in AGREEING for u in ins):
            _set(d, f"moves the indices of var {carried[0].id} ({carried[0].name}), which index equal values")


#: how far before a var its input is looked for by position (one dict of tens of thousands
#: of records is made when it is not there)
_NEAR = 8


def _input_near(diffs: List[object], d: object, vid: int, by_id: Dict[int, object]) -> Optional[object]:
    """The record of var ``vid`` (None: not compared), an input of ``d``: looked for just
    before ``d`` in execution order (``d.index`` its place in ``diffs``), where an index
    output's input usually is, else in ``by_id`` (every record by id, made on first need)."""
    i = getattr(d, "index", None)
    if isinstance(i, int) and 0 <= i < len(diffs) and diffs[i] is d:
        for j in range(i - 1, max(-1, i - 1 - _NEAR), -1):
            if diffs[j].id == vid:  # type: ignore[attr-defined]
                return diffs[j]
    if not by_id:
        by_id.update((x.id, x) for x in diffs)  # type: ignore[attr-defined]
    return by_id.get(vid)


def _set(d: object, note: str) -> None:
    old = d.note  # type: ignore[attr-defined]
    d.__dict__.update(status=INDEX_EQUIVALENT, note=f"{old}; {note}" if old else note)


def _judge_index(d: object, x: object, fa: DumpFolder, fb: DumpFolder, b_of: "object") -> None:
    if x is None or x.status not in ("ok", "divergent") or x.threshold is None:  # type: ignore[attr-defined]
        return
    if _axis(tuple(d.shape), tuple(x.shape)) is None:  # type: ignore[attr-defined]
        return  # not an index into those values as far as the shapes tell: nothing read
    ia, ib = fa[d.id].array(), fb[b_of(d.id)].array()  # type: ignore[attr-defined,operator]
    xa, xb = fa[x.id].array(), fb[b_of(x.id)].array()  # type: ignore[attr-defined,operator]
    va, vb = indexed_values(ia, xa), indexed_values(ib, xb)
    if va is None or vb is None or va.shape != vb.shape:
        return
    moved = int(np.count_nonzero(ia != ib))
    if float_name(x.dtype) is False:  # type: ignore[attr-defined]
        bad = int(np.count_nonzero(va != vb))
        worst = float(np.abs(va.astype(np.float64) - vb.astype(np.float64)).max()) if va.size else 0.0
    else:
        err = megengine_err(va, vb)
        both_nan = np.isnan(va) & np.isnan(vb)
        bad = int(np.count_nonzero((err > to_float32(x.threshold)) | (np.isnan(err) & ~both_nan)))  # type: ignore[attr-defined]
        worst = float(np.nanmax(err)) if err.size and not np.isnan(err).all() else 0.0
    where = f"var {x.id} ({x.name}, threshold {x.threshold:.3g})"  # type: ignore[attr-defined]
    if bad == 0:
        _set(d, f"indices differ at {moved} of {d.size} positions, but the values they index in {where} agree "  # type: ignore[attr-defined]
                f"(largest error {worst:.3g}): ties may reorder")
    else:
        note = f"indices differ at {moved} positions; the values they index in {where} differ at {bad} (largest error {worst:.3g})"
        old = d.note  # type: ignore[attr-defined]
        d.__dict__["note"] = f"{old}; {note}" if old else note

