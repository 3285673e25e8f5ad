"""Compare two ``--bin-io-dump`` folders variable by variable: the orchestration.

The stages, each in its module:

* :mod:`lar_prec.pairing`: which var of A goes with which of B (:class:`~lar_prec.pairing.Pairing`);
* here, planning: each pair becomes a job decided from the headers (missing, shape or dtype
  mismatch) or a value comparison split into element ranges (pieces);
* :mod:`lar_prec.engine`: the streaming engine measures the pieces, one pass over chunks,
  NaN/Inf aware, on the workers :mod:`lar_prec.engine_exec` runs (settings and strategy in
  :class:`EngineSettings`); :mod:`lar_prec.metrics` defines what every number means;
* :mod:`lar_prec.threshold`: the rule (fixed, or auto, chosen from the data once every var is
  measured) that makes a var ``ok`` or ``divergent``; elements above it are recounted where
  they could not be counted in the first pass.

NaN at the same position on both sides (and the same infinity) counts as equal. A position
that is non-finite on one side only, or NaN against Inf, makes the var ``nonfinite``; its
error metrics then describe the positions finite on both sides. Integer, Bool, Byte and
quantized vars compare exactly (quantized raw integers carry ``scale_unknown``).
"""
from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

from lar_prec._lazy import numpy as np  # imported on first use (start-up time)

from lar_prec import engine
from lar_prec.engine import QUIET, Extent, OverScan, kernel_for, kernel_state, scan_over
from lar_prec.engine_exec import (
    DEFAULT_CHUNK,
    PARALLEL_MIN_BYTES,
    PIECE_ELEMENTS,
    SMALL_TASK_ELEMENTS,
    WINDOW_BYTES,
    EngineSettings,
    Strategy,
    ThreadWorkers,
    resolve_strategy,
    run_shared,
)
from lar_prec.engine_plan import (
    ProgressHook,
    base_fields,
    finish_fields,
    measure_forked,
    measure_threaded,
    plan,
    plan_folders,
    run_piece,
)
from lar_prec.errors import UsageError
from lar_prec.records import VarKey
from lar_prec.iodump import DTYPES, BinaryDump, DType, DumpFolder, dtype_by_name
from lar_prec.pairing import Pairing, pair_folders
from lar_prec.threshold import (
    AUTO_BAND_EPS,
    MAX_CANDIDATES,
    SCALE_FLOOR,
    Threshold,
    choose_threshold,
    judge,
    parse_threshold,
    scale_factor,
)

log = logging.getLogger(__name__)

from lar_prec.records import PathLike  # noqa: E402

#: var statuses, in the order reports list them (design.md)
STATUSES = ("ok", "divergent", "nonfinite", "shape_mismatch", "dtype_mismatch", "missing")
#: statuses that come from the values (the others come from headers or file presence)
VALUE_STATUSES = ("ok", "divergent", "nonfinite")

#: public names that moved to their own modules, importable from here as before
__all__ = [
    "AUTO_BAND_EPS", "DEFAULT_CHUNK", "MAX_CANDIDATES", "PARALLEL_MIN_BYTES", "PIECE_ELEMENTS", "SCALE_FLOOR",
    "SMALL_TASK_ELEMENTS", "STATUSES", "VALUE_STATUSES", "WINDOW_BYTES", "Comparison", "EngineSettings", "OverScan",
    "Pairing", "ProgressHook", "Strategy", "Threshold", "VarDiff", "apply_threshold", "choose_threshold",
    "compare_arrays", "compare_dumps", "compare_folders", "kernel_state", "megengine_text", "parse_threshold",
    "scan_over",
]


# ============================================================================ records


@dataclass(frozen=True)
class VarDiff(VarKey):
    """The comparison of one var between folder A and folder B.

    Metrics are None when they do not apply (missing var, shape mismatch, undecodable
    dtype, or no position finite on both sides); :mod:`lar_prec.metrics` defines each.
    ``worst_index`` is the index (in the var's shape) of the element with the largest
    ``max_err``; ``worst_a``/``worst_b`` its values. ``threshold`` is the threshold this var
    was held to and ``n_over`` the number of its elements above it. ``inputs`` are the var
    ids of its owner operator's inputs.
    """

    max_err: Optional[float] = None
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    mean_abs_err: Optional[float] = None
    rmse: Optional[float] = None
    cosine: Optional[float] = None
    max_ulp: Optional[int] = None
    n_over: Optional[int] = None
    worst_index: Optional[Tuple[int, ...]] = None
    worst_a: Optional[float] = None
    worst_b: Optional[float] = None
    scale_unknown: bool = False
    note: str = ""
    #: number of elements
    size: int = 0
    #: largest |value| on either side (finite positions), what the auto threshold scales by
    scale: Optional[float] = None
    #: elements that differ at all (exact types and bitwise checks); None when not counted
    n_diff: Optional[int] = None
    #: positions that are NaN/Inf on one side only (or NaN vs Inf, +Inf vs -Inf)
    n_nonfinite: int = 0
    #: the threshold this var was held to (None: not decided by a threshold)
    threshold: Optional[float] = None
    #: dtype / shape in B when they differ from A's (``dtype``/``shape`` are A's)
    dtype_b: Optional[str] = None
    shape_b: Optional[Tuple[int, ...]] = None
    #: for ``missing``: "a" or "b", the only folder that has the var
    only_in: Optional[str] = None
    #: position in the comparison's execution order
    index: int = 0

    @property
    def ok(self) -> bool:
        """True when the status is ``ok``."""
        return self.status == "ok"

    def __bool__(self) -> bool:
        return self.status == "ok"

    @property
    def norm_err(self) -> Optional[float]:
        """``max_err`` divided by ``min(1, max(scale, SCALE_FLOOR))``: the number the auto
        threshold is compared with (equal to ``max_err`` when the var has values >= 1)."""
        if self.max_err is None:
            return None
        return self.max_err / scale_factor(self.scale)

    @property
    def values_compared(self) -> bool:
        """True when both sides were read and compared value by value."""
        return self.status in VALUE_STATUSES or (self.status == "dtype_mismatch" and self.max_err is not None)


#: the instance dict of a VarDiff built by its __init__ (the first one: field order). It is
#: key-sharing, and so is a copy of it overwritten key by key, at a third of the size of a
#: dict filled by update() (1.2 KB): there is one VarDiff per var, tens of thousands of them
_VARDIFF_DICT: Dict[str, object] = VarDiff(id=0, name="", opr="", opr_type="", dtype="", shape=(), inputs=(), status="").__dict__


def _with_dict(template: Dict[str, object], changes: Dict[str, object]) -> VarDiff:
    # a VarDiff being built here, not one anybody holds: its dict is filled before it is shared
    new = object.__new__(VarDiff)
    values = template.copy()
    values.update(changes.items())  # pairs, not a dict: update() would resize (unshare) it
    object.__setattr__(new, "__dict__", values)
    return new


def _new_diff(fields: Dict[str, object]) -> VarDiff:
    """``VarDiff(**fields)`` without the generated ``__init__``'s per-field frozen setattr
    (a VarDiff has 30 fields; this is per var); only for fields lar-prec computed itself."""
    return _with_dict(_VARDIFF_DICT, fields)


def _with(d: VarDiff, **changes: object) -> VarDiff:
    """``dataclasses.replace`` for VarDiff without re-running ``__init__`` (ten times faster,
    which matters with tens of thousands of vars): a new record, ``d`` is left as it is."""
    return _with_dict(d.__dict__, changes)


@dataclass(frozen=True)
class Comparison:
    """Every var of two dump folders, in execution order, judged by one threshold."""

    dir_a: Path
    dir_b: Path
    diffs: Tuple[VarDiff, ...]
    threshold: Threshold
    #: folder-level remarks: stray files, ``-inp`` files, incomplete runs, renamed vars
    notes: Tuple[str, ...] = ()
    chunk_elements: int = DEFAULT_CHUNK
    #: how vars were paired (``id`` or ``name``) and, by name, ``(side, id, name, reason)`` of
    #: every var left without a partner (:class:`lar_prec.pairing.Pairing`)
    pairing: str = "id"
    unpaired: Tuple[Tuple[str, int, str, str], ...] = ()
    _by_id: Dict[int, VarDiff] = field(default_factory=dict, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {d.id: d for d in self.diffs})

    def __getitem__(self, var_id: int) -> VarDiff:
        try:
            return self._by_id[var_id]
        except KeyError:
            raise KeyError(f"var {var_id} is in neither {self.dir_a} nor {self.dir_b}") from None

    def __contains__(self, var_id: object) -> bool:
        return var_id in self._by_id

    def __iter__(self) -> Iterator[VarDiff]:
        return iter(self.diffs)

    def __len__(self) -> int:
        return len(self.diffs)

    @property
    def ids(self) -> Tuple[int, ...]:
        """Var ids in execution order."""
        return tuple(d.id for d in self.diffs)

    def counts(self) -> Dict[str, int]:
        """Number of vars per status (every status present, zeros included)."""
        out = {s: 0 for s in STATUSES}
        for d in self.diffs:
            out[d.status] += 1
        return out

    @property
    def not_ok(self) -> Tuple[VarDiff, ...]:
        """The vars whose status is not ``ok``, in execution order."""
        return tuple(d for d in self.diffs if d.status != "ok")

    @property
    def diverged(self) -> bool:
        """True when any var is not ``ok`` (the command exits 1)."""
        return any(d.status != "ok" for d in self.diffs)

    def with_threshold(self, spec: Union[str, float, Threshold, None]) -> "Comparison":
        """The same measurements judged by another threshold (``"auto"``, a number, or a
        :class:`Threshold`). Element counts above it are recounted from the files."""
        thr = parse_threshold(spec)
        if thr is None:
            thr = choose_threshold(self.diffs)
        diffs = apply_threshold(self.diffs, thr)
        diffs = _recount(self.dir_a, self.dir_b, diffs, EngineSettings(chunk_elements=self.chunk_elements))
        return replace(self, diffs=tuple(diffs), threshold=thr)


def apply_threshold(diffs: Sequence[VarDiff], thr: Threshold) -> List[VarDiff]:
    """Set ``status``, ``threshold`` (and ``n_over`` where it is known without reading) of
    every value-compared var from ``thr`` (:func:`lar_prec.threshold.judge`). Structural
    statuses are kept."""
    return [_judge(d, thr) for d in diffs]


def _judge(d: VarDiff, thr: Threshold) -> VarDiff:
    changes = judge(d, thr)
    return _with(d, **changes) if changes else d


def compare_dumps(da: BinaryDump, db: BinaryDump, *, chunk_elements: int = DEFAULT_CHUNK, count_over: Optional[float] = None) -> VarDiff:
    """Compare two dumps of one var (shape, dtype, then values) in this thread, unjudged
    (``status`` ``ok`` unless NaN/Inf or headers differ; see :func:`apply_threshold`)."""
    job = plan(Extent.of(da), Extent.of(db), base_fields(da, db, 0), max(da.size, 1))
    st = EngineSettings(chunk_elements=chunk_elements)
    with QUIET:
        parts = [run_piece(job, k, st, count_over) for k in range(len(job.pieces))] if job.done is None else []
    return _new_diff(finish_fields(job, parts))


# ============================================================================ folders


def compare_folders(
    dir_a: PathLike,
    dir_b: PathLike,
    *,
    threshold: Union[str, float, Threshold, None] = "auto",
    chunk_elements: Optional[int] = None,
    jobs: Optional[int] = 1,
    on_progress: Optional[ProgressHook] = None,
    settings: Optional[EngineSettings] = None,
    pairing: str = "id",
) -> Comparison:
    """Compare every var of two ``--bin-io-dump`` folders.

    (Over 80 lines for its argument documentation; the work is in pairing, planning and the
    engine it calls in order.)

    Args:
        dir_a: the reference folder (e.g. the naive run).
        dir_b: the folder compared against it.
        threshold: ``"auto"`` (chosen from the data, docs/threshold.md), a number, or a
            :class:`Threshold`.
        chunk_elements: values read per chunk (overrides ``settings.chunk_elements``);
            memory per worker is about 30 bytes times this.
        jobs: workers (None: one per CPU). Big vars are split into ranges so that one var
            alone keeps every worker busy; results do not depend on ``jobs``. Comparisons
            under ``settings.parallel_min_bytes`` always run in this process.
        on_progress: called as ``on_progress(done_bytes, total_bytes)`` on the calling
            thread; it never changes how the work runs.
        settings: the engine's knobs and execution strategy (:class:`EngineSettings`).
        pairing: how vars of A and B are matched (:func:`lar_prec.pairing.pair_folders`).

    Returns:
        A :class:`Comparison` with one :class:`VarDiff` per var in execution order.

    Raises:
        DumpFolderError: a folder is missing, not a directory, holds no dumps, or the two
            folders have no var in common.
        DumpFormatError: a file is not a valid dump (the message names it).
        UsageError: bad ``threshold``, ``chunk_elements``, ``jobs`` or ``pairing``.
    """
    st = settings if settings is not None else EngineSettings()
    if chunk_elements is not None:
        if chunk_elements < 1:
            raise UsageError(f"chunk_elements must be >= 1, got {chunk_elements}")
        st = replace(st, chunk_elements=chunk_elements)
    if jobs is not None and jobs < 1:
        raise UsageError(f"jobs must be >= 1, got {jobs}")
    fixed = parse_threshold(threshold)
    fa, fb = DumpFolder(dir_a), DumpFolder(dir_b)
    paired = pair_folders(fa, fb, pairing)
    notes = _folder_notes(fa, fb, paired)
    count_over = fixed.value if fixed is not None else None
    plans, kept = plan_folders(fa, fb, paired, keep=count_over is None)
    total = sum(j.nbytes for j in plans)
    n_workers, strategy = resolve_strategy(st, jobs, total)
    if n_workers > 1:
        # big vars are split only to feed several workers
        for i, j in enumerate(plans):
            if j.da is not None and j.db is not None and j.kind != "raw" and j.da.size > st.piece_elements:
                plans[i] = plan(j.da, j.db, j.base, st.piece_elements)
    tasks = [(j, k, st, count_over) for j in plans for k in range(len(j.pieces) if j.done is None else 0)]
    diffs: List[Optional[VarDiff]] = [None] * len(plans)

    def finish(i: int, parts: Sequence[object]) -> None:
        # a compared var keeps only its VarDiff: its job lets go of the extents and fields
        j = plans[i]
        diffs[i] = _new_diff(finish_fields(j, parts))
        j.release()

    measure = measure_forked if strategy == Strategy.FORK else measure_threaded
    measure(plans, tasks, finish, n_workers, st, on_progress, total)
    relaid = None
    if paired.mode == "name":
        relaid = _cross_graph_fixups(fa, fb, paired, diffs, st, count_over, kept)  # type: ignore[arg-type]
    thr = fixed if fixed is not None else choose_threshold(diffs)  # type: ignore[arg-type]
    # judged in place: one list of VarDiffs, not two
    for i, d in enumerate(diffs):
        diffs[i] = _judge(d, thr)  # type: ignore[arg-type]
    try:
        judged = _recount(fa.path, fb.path, diffs, st, extents=kept, jobs=n_workers, strategy=strategy,  # type: ignore[arg-type]
                          b_ids=dict(paired.pairs) if paired.mode == "name" else None)
    finally:
        if relaid is not None:
            relaid.cleanup()
    return Comparison(dir_a=fa.path, dir_b=fb.path, diffs=tuple(judged), threshold=thr, notes=tuple(notes),
                      chunk_elements=st.chunk_elements, pairing=paired.mode, unpaired=paired.unpaired)


def _cross_graph_fixups(fa: DumpFolder, fb: DumpFolder, paired: Pairing, diffs: List[Optional[VarDiff]],
                        st: EngineSettings, count_over: Optional[float],
                        kept: Dict[int, Tuple[Extent, Extent]]) -> "Optional[tempfile.TemporaryDirectory]":
    """Vars paired by name across rewritten graphs, before any threshold: a var B dumped in
    a transformed layout (NCHW44, NHWCD4, ...) is brought back to A's NCHW shape and measured
    again (:mod:`lar_prec.relayout`; ambiguous layouts stay ``shape_mismatch``, the note says
    why); a float var an fp16 rewrite narrowed is compared as A's dtype (the cast is exact);
    every pair whose ids differ notes B's id. The converted B values are written to a
    temporary folder, returned (the caller removes it) and entered in ``kept`` by A's id
    for the second pass of an auto threshold."""

    from lar_prec.graphopts import formats_beside_dump  # megengine only when a layout is ambiguous
    from lar_prec.iodump import read_binary_dump, write_binary_dump
    from lar_prec.relayout import to_plain

    tmp: Optional[tempfile.TemporaryDirectory] = None
    formats: Optional[Dict[str, str]] = None
    try:
        for i, (ida, idb) in enumerate(paired.order):
            d = diffs[i]
            if d is None or ida is None or idb is None:
                continue
            note = f"B's var {idb}" if ida != idb else ""
            if d.status in ("shape_mismatch", "dtype_mismatch"):
                da, db = fa[ida], fb[idb]
                arr, why = db.array(), []
                if tuple(arr.shape) != tuple(da.shape):
                    plain, det = to_plain(arr, da.shape, layout=db.var.layout)
                    if det.kind == "ambiguous":
                        if formats is None:
                            formats = formats_beside_dump(fb.path)
                        plain, det = to_plain(arr, da.shape, fmt=formats.get(db.var.name), layout=db.var.layout)
                    arr = plain
                    why.append(f"not relaid out: {det.reason or det.kind}" if plain is None
                               else f"B relaid out from {det.kind} ({det.source})")
                code = db.dtype.code
                if arr is not None and da.dtype.name != db.dtype.name and da.dtype.kind == db.dtype.kind == "float":
                    # an fp16 rewrite (ioc16, io16xc32): B's values widened exactly to A's dtype
                    arr, code = arr.astype(da.dtype.value_dtype()), da.dtype.code
                    why.append(f"B's {db.dtype.name} values compared as {da.dtype.name}")
                if arr is not None and (tuple(arr.shape) != tuple(db.shape) or code != db.dtype.code):
                    if tmp is None:
                        tmp = tempfile.TemporaryDirectory(prefix="lar-prec-relayout-")
                    path = Path(tmp.name) / f"{ida:06x}"  # the file name carries the id of the title (A's)
                    write_binary_dump(path, arr, da.title, dtype=code)
                    conv = read_binary_dump(path)
                    fresh = compare_dumps(da, conv, chunk_elements=st.chunk_elements, count_over=count_over)
                    d = _with(fresh, index=d.index)
                    kept[ida] = (Extent.of(da), Extent.of(conv))
                note = "; ".join([note] * bool(note) + why)
            if note:
                diffs[i] = _with(d, note="; ".join(x for x in (d.note, note) if x))
    except BaseException:
        if tmp is not None:
            tmp.cleanup()
        raise
    return tmp


def _folder_notes(fa: DumpFolder, fb: DumpFolder, paired: Pairing) -> List[str]:
    notes = []
    for tag, f in (("A", fa), ("B", fb)):
        if f.stray:
            names = ", ".join(p.name for p in f.stray[:3]) + (" ..." if len(f.stray) > 3 else "")
            notes.append(f"{tag} ({f.path}): {len(f.stray)} entries that are not dumps ignored: {names}")
        if f.incomplete:
            notes.append(f"{tag} ({f.path}): marked incomplete (the run did not finish)")
        if f.input_files:
            notes.append(f"{tag} ({f.path}): {len(f.input_files)} MGB_DUMP_INPUT '-inp' files not compared as vars (they repeat their input vars)")
    if paired.mode == "name":
        for side, f in (("a", fa), ("b", fb)):
            left = [u for u in paired.unpaired if u[0] == side]
            if left:
                shown = ", ".join(f"{n} ({r})" for _, _, n, r in left[:3]) + (" ..." if len(left) > 3 else "")
                notes.append(f"paired by var name: {len(left)} var(s) of {side.upper()} ({f.path}) have no partner: {shown}")
    only_a, only_b = len(paired.only_a), len(paired.only_b)
    if only_a or only_b:
        notes.append(f"{only_a} var(s) only in A, {only_b} only in B (status 'missing')")
    return notes


# ============================================================================ second pass


def _count_task(da: Extent, db: Extent, start: int, end: int, st: EngineSettings, threshold: float) -> int:
    return engine.count_range(da, db, start, end, st, threshold, kernel_for(st))


def _recount(
    dir_a: Path, dir_b: Path, diffs: Sequence[VarDiff], st: EngineSettings,
    extents: Optional[Dict[int, Tuple[Extent, Extent]]] = None, jobs: int = 1, strategy: Strategy = Strategy.SERIAL,
    b_ids: Optional[Dict[int, int]] = None,
) -> List[VarDiff]:
    """Fill ``n_over`` where it is unknown: count elements above each var's threshold.
    ``extents`` (by var id) saves reading the headers again; ``b_ids`` maps A's ids to B's
    when the vars were paired by name."""
    todo = [i for i, d in enumerate(diffs) if d.n_over is None and d.threshold is not None and d.max_err is not None]
    if not todo:
        return list(diffs)
    folders: Optional[Tuple[DumpFolder, DumpFolder]] = None
    out = list(diffs)
    tasks: List[Tuple[int, Extent, Extent, int, int, float]] = []
    piece = max(st.chunk_elements, st.piece_elements) if jobs > 1 else 1 << 62
    for i in todo:
        d = out[i]
        pair = (extents or {}).get(d.id)
        if pair is None:
            folders = folders or (DumpFolder(dir_a), DumpFolder(dir_b))
            pair = (Extent.of(folders[0][d.id]), Extent.of(folders[1][(b_ids or {}).get(d.id, d.id)]))
        da, db = pair
        if da.dtype.code != db.dtype.code:
            out[i] = _with(d, n_over=scan_over(da, db, d.threshold or 0.0, chunk=st.chunk_elements).count)
            continue
        for start in range(0, da.size, piece):
            tasks.append((i, da, db, start, min(da.size, start + piece), d.threshold or 0.0))
    args = [(t[1], t[2], t[3], t[4], st, t[5]) for t in tasks]
    n = jobs if len(tasks) > 1 else 1
    if n > 1 and strategy == Strategy.FORK:
        got: Sequence[object] = run_shared(_count_task, args, n - 1)
    else:
        with ThreadWorkers(n, st.small_task_elements) as workers:
            got = list(workers.map(_count_task, args, [t[4] - t[3] for t in tasks]))
    counts: Dict[int, int] = {}
    for (i, *_rest), c in zip(tasks, got):
        counts[i] = counts.get(i, 0) + c  # type: ignore[operator]
    for i, c in counts.items():
        out[i] = _with(out[i], n_over=c)
    return out


# ============================================================================ arrays


def compare_arrays(
    a: "np.ndarray",
    b: "np.ndarray",
    *,
    threshold: Union[float, Threshold, str, None] = None,
    dtype: Optional[str] = None,
    var_id: int = 0,
    name: str = "",
) -> VarDiff:
    """Compare two in-memory arrays with the same metrics as :func:`compare_folders`
    (:func:`lar_prec.metrics.reference` is the plain whole-array definition of each).

    Args:
        a: reference values.
        b: values compared against ``a``.
        threshold: a number, a :class:`Threshold`, ``"auto"`` or None (auto): decides the status.
        dtype: MegDNN dtype name; by default inferred from ``a.dtype`` (float32 -> Float32).
        var_id: id given to the result.
        name: name given to the result.

    Returns:
        The :class:`VarDiff` (``opr``/``opr_type`` empty, no inputs).
    """

    from lar_prec.iodump import VarInfo, format_title, write_binary_dump

    a = np.asarray(a)
    b = np.asarray(b)
    dt_a = dtype_by_name(dtype) if dtype else _infer_dtype(a)
    dt_b = dtype_by_name(dtype) if dtype else _infer_dtype(b)
    # one code path for files and arrays: the arrays go through a temporary dump pair
    with tempfile.TemporaryDirectory(prefix="lar-prec-arrays-") as tmp:
        paths = []
        for tag, arr, dt in (("a", a, dt_a), ("b", b, dt_b)):
            info = VarInfo(
                id=var_id, name=name or "array", owner="array", opr_type="", opr_id=None, dtype=dt.name,
                shape=tuple(arr.shape), layout=None, slot=0, comp_node='CompNode("cpu0:0" from "cpu0:0")', storage="s",
            )
            d = Path(tmp) / tag
            d.mkdir()
            arr_w = arr if arr.size else arr.reshape(arr.shape)
            if arr.ndim == 0:
                arr_w = arr.reshape(())
            write_binary_dump(d / f"{var_id:06x}", arr_w, format_title(info), dt.code)
            paths.append(d)
        cmp = compare_folders(paths[0], paths[1], threshold="auto" if threshold is None else threshold)
        return replace(cmp.diffs[0], opr="", opr_type="", name=name)


def _infer_dtype(arr: "np.ndarray") -> DType:
    for d in DTYPES.values():
        if d.storage is not None and d.storage == arr.dtype and d.name != "BFloat16" and d.kind not in ("quantized", "byte"):
            return d
    raise UsageError(f"no MegDNN dtype for numpy {arr.dtype}; pass dtype=")


def __getattr__(name: str) -> object:
    # the compare_binary_iodump text writer moved to megcompat (which imports this module);
    # importable from here as before, resolved on first use
    if name == "megengine_text":
        from lar_prec.megcompat import megengine_text

        return megengine_text
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
