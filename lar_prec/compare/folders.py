"""Compare two ``--bin-io-dump`` folders variable by variable: the orchestration.

The stages, each in its module:

* :mod:`lar_prec.compare.pairing`: which var of A goes with which of B (:class:`~lar_prec.pairing.Pairing`);
* here, planning: each pair becomes a job decided from the headers (missing, shape or dtype
  mismatch) or a value comparison split into element ranges (pieces);
* :mod:`lar_prec.compare.engine.scan`: the streaming engine measures the pieces, one pass over chunks,
  NaN/Inf aware, on the workers :mod:`lar_prec.compare.engine.workers` runs (settings and strategy in
  :class:`EngineSettings`); :mod:`lar_prec.compare.metrics` defines what every number means;
* :mod:`lar_prec.compare.threshold`: the rule (fixed, or auto, chosen from the data once every var is
  measured) that makes a var ``ok`` or ``divergent``; elements above it are recounted where
  they could not be counted in the first pass.

NaN at the same position on both sides (and the same infinity) counts as equal. A position
that is non-finite on one side only, or NaN against Inf, makes the var ``nonfinite``; its
error metrics then describe the positions finite on both sides. Integer, Bool, Byte and
quantized vars compare exactly (quantized raw integers carry ``scale_unknown``).
"""
from __future__ import annotations

import json
import logging
import math
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union


from lar_prec.compare.engine import batch
from lar_prec.compare.engine.chunks import QUIET, count_range
from lar_prec.compare.engine.io import Extent
from lar_prec.compare.engine.scan import KERNEL, kernel_for, scan_over
from lar_prec.compare.engine.workers import (
    DEFAULT_CHUNK,
    EngineSettings,
    Strategy,
    ThreadWorkers,
    default_jobs,
    resolve_strategy,
    run_shared,
)
from lar_prec.compare.engine.plan import (
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
from lar_prec.dumps.binary import BinaryDump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.pairing import Pairing, pair_folders
from lar_prec.compare.recheck import Recheck, by_shapes, rechecker
from lar_prec.compare.fused import through_unpaired
from lar_prec.compare.growth import Through, grow, grow_columns, kind_code, with_growth
from lar_prec.compare.indices import INDEX_TYPES, judge_indices
from lar_prec.compare.sources import SOURCE_TYPES, judge_sources
from lar_prec.compare.threshold import (
    FLOAT_NAMES,
    RECORDS_MAX,
    SCALE_FLOOR,
    WINDOW_ROWS,
    Threshold,
    VarColumns,
    choose_threshold,
    count_from_band,
    judge,
    judge_all,
    parse_threshold,
)
from lar_prec.lar.graphopts import formats_beside_dump
from lar_prec.dumps.binary import read_binary_dump, write_binary_dump
from lar_prec.dumps.dtypes import dtype_by_name
from lar_prec.compare.relayout import to_plain

log = logging.getLogger(__name__)

from lar_prec.records import PathLike  # noqa: E402
from lar_prec.compare.records import Comparison, VarDiff, new_diff, with_changes

def apply_threshold(diffs: Sequence[VarDiff], thr: Threshold) -> List[VarDiff]:
    """Set ``status``, ``threshold`` (and ``n_over`` where it is known without reading) of
    every value-compared var from ``thr`` (:func:`lar_prec.threshold.judge`). Structural
    statuses are kept."""
    return [_judge(d, thr) for d in diffs]


def _judge(d: VarDiff, thr: Threshold) -> VarDiff:
    changes = judge(d, thr)
    return with_changes(d, **changes) if changes else d


def compare_dumps(da: BinaryDump, db: BinaryDump, *, chunk_elements: int = DEFAULT_CHUNK, count_over: Optional[float] = None,
                  pass_ratio: float = 1.0, stats: bool = False) -> VarDiff:
    """Compare two dumps of one var (shape, dtype, then values) in this thread, unjudged
    (``status`` ``ok`` unless NaN/Inf or headers differ; see :func:`apply_threshold`).
    ``pass_ratio``/``stats``: as :func:`compare_folders`."""
    st = EngineSettings(chunk_elements=chunk_elements)
    # in ranges as a folder's var is (compare_folders): the same sums
    job = plan(Extent.of(da), Extent.of(db), base_fields(da, db, 0), st.piece_elements)
    with QUIET:
        parts = [run_piece(job, k, st, count_over, stats) for k in range(len(job.pieces))] if job.done is None else []
    return new_diff(finish_fields(job, parts, pass_ratio))


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
    layout_format: Optional[str] = None,
    pass_ratio: float = 1.0,
    stats: bool = False,
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
        layout_format: by name, the operator format B's graph was rewritten to (``NCHW44``,
            ...): it settles shapes that fit two layouts before the model beside B is asked.
        pass_ratio: a float var whose max_err is above its threshold passes (``ok``, with a
            note) when at least this share of its elements is within it (``--pass-ratio``;
            1: every element must be).
        stats: also the quantiles of each float var's relative and absolute error (``--stats``;
            MegEngine's error's are always there), at about twice the engine's time.

    Returns:
        A :class:`Comparison` with one :class:`VarDiff` per var in execution order.

    Raises:
        DumpFolderError: a folder is missing, not a directory, holds no dumps, or the two
            folders have no var in common.
        DumpFormatError: a file is not a valid dump (the message names it).
        UsageError: bad ``threshold``, ``chunk_elements``, ``jobs``, ``pairing`` or ``pass_ratio``.
    """
    if not 0.0 < pass_ratio <= 1.0:
        raise UsageError(f"pass ratio must be in (0, 1], got {pass_ratio!r}")
    st = settings if settings is not None else EngineSettings()
    if chunk_elements is not None:
        if chunk_elements < 1:
            raise UsageError(f"chunk_elements must be >= 1, got {chunk_elements}")
        st = replace(st, chunk_elements=chunk_elements)
    if jobs is not None and jobs < 1:
        raise UsageError(f"jobs must be >= 1, got {jobs}")
    fixed = parse_threshold(threshold)
    batched = pairing in ("id", "auto") and st.batch and kernel_for(st) is not None and batch.available()
    fa, fb = DumpFolder(dir_a, lister=batch.list_folder), DumpFolder(dir_b, lister=batch.list_folder)
    count_over = fixed.value if fixed is not None else None
    measured = None
    rows: Optional[Dict[int, Tuple[Any, ...]]] = {} if fixed is None else None  # auto: what it reads of each var
    if batched:
        # one read of each pair of files: headers, titles and values, a big file mapped a window
        # at a time (C threads: no workers to fork, no numpy, no Python per window)
        measured = batch.prefetch(fa, fb, st.chunk_elements, fixed, threads=default_jobs(jobs), ratio=pass_ratio,
                                  full=stats, rows=rows, piece=st.piece_elements, on_progress=on_progress)
    paired = pair_folders(fa, fb, pairing)
    notes = _folder_notes(fa, fb, paired)
    if paired.mode == "id" and measured and len(measured) == len(paired.order) \
            and all(a in measured for a, _ in paired.order):
        # the batch reader measured every var (a folder of small vars; with a fixed threshold
        # judged too): their records in execution order, no jobs to plan
        diffs, index_at, source_at = _in_order(measured, paired)
        files = (fa.files(), fb.files())
        # not kept for the auto rule's recheck: holding 40,000 headers raised the peak by 14 MB
        # of a 20,000-var compare (8 MB measured again), re-reading the few hundred it needs costs ~15 ms
        fa.forget_all()
        fb.forget_all()
        if on_progress is not None:  # all read: the bytes of both sides
            total = sum(2 * dtype_by_name(d.dtype).nbytes(d.size) for d in diffs)
            on_progress(total, total)
        sources: List[int] = []
        todo: Optional[List[int]] = None if fixed is not None else []  # auto: the vars left to count
        thr = fixed if fixed is not None else _judge_auto(diffs, fa, fb, notes, sources,
                                                          rechecker(fa, fb),
                                                          [rows[v] for v, _ in paired.order] if rows else None, todo,
                                                          source_at)
        if fixed is not None:
            sources += judge_sources([diffs[i] for i in source_at])  # type: ignore[arg-type]
        judge_indices(diffs, fa, fb, at=index_at)  # type: ignore[arg-type]
        # counts of elements over each var's own threshold where the first pass could not make
        # them (auto; a fixed value scaled by magnitude), from the files
        diffs = _recount(fa.path, fb.path, diffs, st, files=files, jobs=default_jobs(jobs), todo=todo)
        return _comparison(fa, fb, _by_ratio(diffs, pass_ratio, notes), thr, notes, st, paired, pass_ratio, sources)
    plans, kept = plan_folders(fa, fb, paired, keep=count_over is None,
                               measured=measured if paired.mode == "id" else None)
    measured = rows = None  # the jobs hold the records now (judging replaces them: no second copy kept)
    total = sum(j.nbytes for j in plans)
    # workers only for what is left to measure
    n_workers, strategy = resolve_strategy(st, jobs, sum(j.nbytes for j in plans if j.done is None))
    # big vars are split to feed several workers, and with one too: a var's sums are then made
    # per range whatever the workers (and as the batch reader makes them), so the same numbers
    for i, j in enumerate(plans):
        if j.done is None and j.da is not None and j.db is not None and j.kind != "raw" and j.da.size > st.piece_elements:
            plans[i] = plan(j.da, j.db, j.base, st.piece_elements)
    tasks = [(j, k, st, count_over, stats) for j in plans for k in range(len(j.pieces) if j.done is None else 0)]
    # the batch reader's vars were judged by a fixed threshold as they were made
    judged = [j.diff is not None and fixed is not None for j in plans]
    diffs: List[Optional[VarDiff]] = [None] * len(plans)

    def finish(i: int, parts: Sequence[object]) -> None:
        # a compared var keeps only its VarDiff: its job lets go of the extents and fields
        j = plans[i]
        diffs[i] = j.diff if j.diff is not None else new_diff(finish_fields(j, parts, pass_ratio))
        j.release()

    if tasks:
        measure = measure_forked if strategy == Strategy.FORK else measure_threaded
        measure(plans, tasks, finish, n_workers, st, on_progress, total)
    else:  # the batch reader measured every var (nor numpy nor workers needed)
        for i in range(len(plans)):
            finish(i, ())
        if on_progress is not None:
            on_progress(total, total)
    relaid = None
    if paired.mode == "name":
        relaid = _cross_graph_fixups(fa, fb, paired, diffs, st, count_over, kept,  # type: ignore[arg-type]
                                     layout_format, (pass_ratio, stats))
    sources = []
    if fixed is not None:
        thr = fixed
        for i, d in enumerate(diffs):  # judged in place: one list of VarDiffs, not two
            if not judged[i]:
                diffs[i] = _judge(d, thr)  # type: ignore[arg-type]
        if paired.mode == "id":
            sources += judge_sources(diffs)  # type: ignore[arg-type]
    else:
        thr = _judge_auto(diffs, fa, fb, notes, sources if paired.mode == "id" else None,  # type: ignore[arg-type]
                          rechecker(fa, fb, dict(paired.pairs)),
                          through=through_unpaired(diffs, fa) if paired.mode == "name" else None)  # type: ignore[arg-type]
    judge_indices(diffs, fa, fb, dict(paired.pairs) if paired.mode == "name" else None)  # type: ignore[arg-type]
    try:
        judged = _recount(fa.path, fb.path, diffs, st, extents=kept, jobs=n_workers, strategy=strategy,  # type: ignore[arg-type]
                          b_ids=dict(paired.pairs) if paired.mode == "name" else None)
    finally:
        if relaid is not None:
            relaid.cleanup()
    return _comparison(fa, fb, _by_ratio(judged, pass_ratio, notes), thr, notes, st, paired, pass_ratio, sources)


def _judge_auto(diffs: List[VarDiff], fa: DumpFolder, fb: DumpFolder, notes: List[str],
                sources: Optional[List[int]], recheck: Recheck,
                rows: Optional[List[Tuple[Any, ...]]] = None, todo: Optional[List[int]] = None,
                source_at: Optional[Sequence[int]] = None,
                through: Optional[Dict[int, Through]] = None) -> Threshold:
    """Judge ``diffs`` in place by the auto rule: the band chosen from the data, constants and
    inputs exactly (``sources`` given: one graph on both sides; the ids of those that differ
    go there), then each var against what its inputs explain (:mod:`~lar_prec.compare.growth`;
    a var it names is ``recheck``-ed from each side's own inputs), quantized vars one step
    apart; returns the threshold (with the growth's decision). ``rows``: each var's
    :data:`~lar_prec.compare.threshold.COLUMN_FIELDS`, in order, where the batch reader kept them.
    ``todo``: given, filled with the positions :func:`_recount` is left to look at (the others'
    counts made here from what the batch reader kept, :func:`count_from_band`). ``source_at``: the
    positions of the constants and inputs, where the caller has them (else looked for).
    ``through``: vars paired by name judged through the operators the other side fused away
    (:mod:`~lar_prec.compare.fused`; record by record)."""
    # a few vars: record by record; more, by columns in the C kernel
    cols = VarColumns.of(diffs, rows, kind_code) if len(diffs) > RECORDS_MAX and not through else None
    if cols is None:  # few vars, a var id repeats or no kernel: record by record (no columns to try again)
        thr = choose_threshold(diffs)
        for d in diffs:
            d.__dict__.update(judge(d, thr))  # records this comparison made and not yet shared
        if sources is not None:
            sources += judge_sources(diffs)  # type: ignore[arg-type]
        grown, growth = grow(diffs, thr, profiled=_profiled(fa) or _profiled(fb), recheck=recheck, in_place=True,
                             records=True, through=through)
        stepped, one_step = _one_step(grown)
        if todo is not None:
            todo.extend(range(len(diffs)))
    else:  # each record read once and written once (tens of thousands of them)
        thr = choose_threshold(diffs, cols)
        status, thresh, n_over = judge_all(cols, thr)
        if sources is not None:
            # only a constant or input that differs at all changes (judge_sources): few, or none
            mae = cols.max_abs_err
            if source_at is None:
                source_at = [i for i, o in enumerate(cols.opr_type) if o in SOURCE_TYPES]
            at = [i for i in source_at if mae[i]]
            for i in at:
                diffs[i].__dict__.update(status=status[i], threshold=thresh[i], n_over=n_over[i])
            sources += judge_sources([diffs[i] for i in at])
            for i in at:
                status[i], thresh[i], n_over[i] = diffs[i].status, diffs[i].threshold, diffs[i].n_over
        pos, shapes = cols.pos, cols.shape
        growth, _ = grow_columns(diffs, cols, status, thresh, n_over, thr, _profiled(fa) or _profiled(fb),
                                 by_shapes(recheck, lambda v: shapes[pos[v]] if v in pos else None))
        steps = _apply_judged(diffs, cols, status, thresh, n_over, todo)  # quantized vars one step apart
        if todo is not None:
            todo.extend(i for i, st in enumerate(cols.status) if st == "missing" or st == "shape_mismatch")
        stepped, one_step = _one_step(diffs, steps)
    if one_step:
        notes.append(one_step)
    diffs[:] = stepped
    return with_growth(thr, growth)


#: the statuses the kernel's apply_judged tells apart (Python's own str objects)
_APPLY_WORDS = ("divergent", "missing", "shape_mismatch")


def _apply_judged(diffs: List[VarDiff], cols: VarColumns, status: Sequence[Any], thresh: Sequence[Any],
                  n_over: Sequence[Any], todo: Optional[List[int]]) -> List[int]:
    """Write each judged var's ``status``, ``threshold`` and ``n_over`` into its record (records
    this comparison made and not yet shared), its count over the threshold made from the
    errors the batch reader kept where it must be counted (else its position goes to ``todo``,
    for :func:`_recount`); returns the positions of divergent quantized vars one step apart."""
    fast = getattr(KERNEL, "apply_judged", None)
    if fast is not None:
        return fast(diffs, cols.status, status, thresh, n_over, cols.max_err, cols.dtype, cols.scale,
                    cols.max_abs_err, WINDOW_ROWS, todo, SCALE_FLOOR, _APPLY_WORDS)
    max_err, dtype, scale, max_abs_err = cols.max_err, cols.dtype, cols.scale, cols.max_abs_err
    steps = []
    for i, st0 in enumerate(cols.status):
        if st0 == "missing" or st0 == "shape_mismatch":
            continue
        d, st, no, t = diffs[i], status[i], n_over[i], thresh[i]
        if no is None and todo is not None and t is not None and max_err[i] is not None:
            # the threshold is final: counted from the errors the batch reader kept, or later
            no = count_from_band(d.band, dtype[i], scale[i], t)
            if no is None:
                todo.append(i)
        fields = d.__dict__
        fields["status"], fields["threshold"], fields["n_over"] = st, t, no
        if st == "divergent" and max_abs_err[i] == 1 and dtype[i].startswith("Quantized"):
            steps.append(i)
    return steps


def _comparison(fa: DumpFolder, fb: DumpFolder, diffs: Sequence[VarDiff], thr: Threshold, notes: Sequence[str],
                st: EngineSettings, paired: Pairing, pass_ratio: float = 1.0, sources: Sequence[int] = ()) -> Comparison:
    if pass_ratio < 1.0:
        thr = replace(thr, pass_ratio=pass_ratio)
    return Comparison(dir_a=fa.path, dir_b=fb.path, diffs=tuple(diffs), threshold=thr, notes=tuple(notes),
                      chunk_elements=st.chunk_elements, pairing=paired.mode, unpaired=paired.unpaired,
                      pairs=paired.pairs, sources=tuple(sources))


def _in_order(measured: Dict[int, VarDiff], paired: Pairing) -> Tuple[List[VarDiff], List[int], List[int]]:
    """The batch reader's records of every entry of ``paired``, in its order, each given its
    place (``index``) as its job would (:func:`~lar_prec.compare.engine.plan.plan_folders`),
    and the places of the index outputs (:data:`~lar_prec.compare.indices.INDEX_TYPES`) and of
    the constants and inputs (:data:`~lar_prec.compare.sources.SOURCE_TYPES`), seen while each
    record is at hand (judge_indices and judge_sources need not go through them all again)."""
    out: List[VarDiff] = []
    index_at: List[int] = []
    source_at: List[int] = []
    for i, (v, _) in enumerate(paired.order):
        d = measured[v]
        fields = d.__dict__
        fields["index"] = i  # a record not yet shared
        t = fields["opr_type"]
        if t in INDEX_TYPES:
            index_at.append(i)
        elif t in SOURCE_TYPES:
            source_at.append(i)
        out.append(d)
    return out, index_at, source_at


#: the note of a quantized var that differs by exactly one step (issue 23 #3)
ONE_STEP_NOTE = "one quantization step: optimised int8 kernels may round differently (not a divergence)"


def _one_step(diffs: Sequence[VarDiff], at: Optional[Sequence[int]] = None) -> Tuple[List[VarDiff], Optional[str]]:
    """Quantized vars whose raw integers differ by exactly one step (a kernel's rounding, not a
    fault) become ``ok`` with :data:`ONE_STEP_NOTE`; larger differences stay divergent. The
    second item is the comparison's note counting them (None: none). ``at``: the positions of
    such vars when the caller knows them (the others are not read)."""
    out: List[VarDiff] = list(diffs)
    hit: List[VarDiff] = []
    for i in range(len(out)) if at is None else at:
        d = out[i]
        if d.status == "divergent" and d.dtype.startswith("Quantized") and d.max_abs_err == 1:
            d = out[i] = with_changes(d, status="ok", note=(d.note + "; " if d.note else "") + ONE_STEP_NOTE)
            hit.append(d)
    if not hit:
        return out, None
    where = ", ".join(f"{d.name} (var {d.id}, {d.n_diff if d.n_diff is not None else '?'} elements)" for d in hit[:3])
    more = f" and {len(hit) - 3} more" if len(hit) > 3 else ""
    return out, (f"{len(hit)} quantized var(s) differ by exactly one quantization step, counted apart from "
                 f"divergence (optimised int8 kernels may round differently): {where}{more}")


#: the note of a var that passes only by the pass ratio
PASS_RATIO_NOTE = "passes by the pass ratio"


def _by_ratio(diffs: List[VarDiff], ratio: float, notes: List[str]) -> List[VarDiff]:
    """Float vars above their threshold in no more elements than ``ratio`` allows become ``ok``
    (``--pass-ratio``: at least ``ceil(ratio * size)`` elements within it, as their
    ``pass_threshold`` says), with a note; ``notes`` gets one line counting them."""
    if ratio >= 1.0:
        return diffs
    passed = []
    for i, d in enumerate(diffs):
        if d.status == "divergent" and d.dtype in FLOAT_NAMES and d.n_over is not None and d.size \
                and d.size - d.n_over >= max(1, math.ceil(ratio * d.size)):
            note = (f"{PASS_RATIO_NOTE} {ratio:g}: {d.size - d.n_over} of {d.size} elements within the "
                    f"threshold ({d.n_over} above it, max_err {d.max_err:.3g})")
            diffs[i] = with_changes(d, status="ok", note=(d.note + "; " if d.note else "") + note)
            passed.append(d)
    if passed:
        shown = ", ".join(f"{d.name} (var {d.id})" for d in passed[:3]) + (" ..." if len(passed) > 3 else "")
        notes.append(f"{len(passed)} var(s) above their threshold pass by the pass ratio {ratio:g} (at least that "
                     f"share of their elements within it): {shown}")
    return diffs


def _profiled(folder: DumpFolder) -> bool:
    """Whether the run that wrote ``folder`` profiled its algorithms (--fast-run/--full-run),
    read from the run.json beside it when lar-prec ran it; only compared with two flag words."""
    try:
        argv = json.loads((folder.path.parent / "run.json").read_text(encoding="utf-8")).get("argv")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(argv, list) and any(a in ("--fast-run", "--full-run") for a in argv if isinstance(a, str))


def _cross_graph_fixups(fa: DumpFolder, fb: DumpFolder, paired: Pairing, diffs: List[Optional[VarDiff]],
                        st: EngineSettings, count_over: Optional[float],
                        kept: Dict[int, Tuple[Extent, Extent]],
                        layout_format: Optional[str] = None,
                        ratio_stats: Tuple[float, bool] = (1.0, False)) -> "Optional[tempfile.TemporaryDirectory]":
    """Vars paired by name across rewritten graphs, before any threshold: a var B dumped in
    a transformed layout (NCHW44, NHWCD4, ...) is brought back to A's NCHW shape and measured
    again (:mod:`lar_prec.compare.relayout`; ambiguous layouts stay ``shape_mismatch``, the note says
    why); a float var an fp16 rewrite narrowed is compared as A's dtype (the cast is exact);
    every pair whose ids differ notes B's id. The converted B values are written to a
    temporary folder, returned (the caller removes it) and entered in ``kept`` by A's id
    for the second pass of an auto threshold."""


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
                    plain, det = to_plain(arr, da.shape, fmt=layout_format, layout=db.var.layout)
                    if det.kind == "ambiguous" and layout_format is None:
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
                    fresh = compare_dumps(da, conv, chunk_elements=st.chunk_elements, count_over=count_over,
                                          pass_ratio=ratio_stats[0], stats=ratio_stats[1])
                    d = with_changes(fresh, index=d.index)
                    kept[ida] = (Extent.of(da), Extent.of(conv))
                note = "; ".join([note] * bool(note) + why)
            if note:
                diffs[i] = with_changes(d, note="; ".join(x for x in (d.note, note) if x))
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
    return count_range(da, db, start, end, st, threshold, kernel_for(st))


def _recount(
    dir_a: Path, dir_b: Path, diffs: Sequence[VarDiff], st: EngineSettings,
    extents: Optional[Dict[int, Tuple[Extent, Extent]]] = None, jobs: int = 1, strategy: Strategy = Strategy.SERIAL,
    b_ids: Optional[Dict[int, int]] = None, files: Optional[Tuple[Dict[int, str], Dict[int, str]]] = None,
    shared: bool = False, todo: Optional[Sequence[int]] = None,
) -> List[VarDiff]:
    """Fill ``n_over`` where it is unknown: count elements above each var's threshold.
    ``extents`` (by var id) saves reading the headers again; ``b_ids`` maps A's ids to B's
    when the vars were paired by name; ``files`` (A's and B's file by id) are the files of
    vars the batch reader measured. Float32 and float16 vars are counted by the kernel's
    ``count_pairs`` (reading only, on threads), the rest (and the numpy path) by the engine;
    a var whose errors inside its auto window the batch reader kept is not read again.
    ``shared``: the records may be held elsewhere (copies are made, else they are filled in).
    ``todo``: the only positions to look at (None: every var)."""
    todo = [i for i in (range(len(diffs)) if todo is None else todo)
            if diffs[i].n_over is None and diffs[i].threshold is not None and diffs[i].max_err is not None]
    if not todo:
        return list(diffs)
    folders: Optional[Tuple[DumpFolder, DumpFolder]] = None
    out = list(diffs)
    kernel = kernel_for(st)
    in_c = kernel is not None and hasattr(kernel, "count_pairs")
    c_pairs: List[Tuple[int, str, int, str, int, int, bool, float]] = []
    tasks: List[Tuple[int, Extent, Extent, int, int, float]] = []
    piece = max(st.chunk_elements, st.piece_elements) if jobs > 1 else 1 << 62

    def extents_of(d: VarDiff) -> Tuple[Extent, Extent]:
        nonlocal folders
        pair = (extents or {}).get(d.id)
        if pair is None:
            folders = folders or (DumpFolder(dir_a), DumpFolder(dir_b))
            pair = (Extent.of(folders[0][d.id]), Extent.of(folders[1][(b_ids or {}).get(d.id, d.id)]))
        return pair

    for i in todo:
        d = out[i]
        t = d.threshold or 0.0
        n_over = count_from_band(d.band, d.dtype, d.scale, t)
        if n_over is not None:  # what the batch reader kept of its errors tells
            out[i] = with_changes(d, n_over=n_over) if shared else _set(d, n_over)
            continue
        half = d.dtype == "Float16"
        if in_c and files is not None and d.dtype in ("Float32", "Float16") and d.id in files[0] and d.id in files[1]:
            c_pairs.append((i, files[0][d.id], -1, files[1][d.id], -1, d.size, half, t))
            continue
        da, db = extents_of(d)
        if da.dtype.code != db.dtype.code:
            out[i] = with_changes(d, n_over=scan_over(da, db, t, chunk=st.chunk_elements).count)
            continue
        k = 2 if half else 4
        for start in range(0, da.size, piece):
            end = min(da.size, start + piece)
            if in_c and da.dtype.name in ("Float32", "Float16"):
                c_pairs.append((i, da.file, da.data_offset + start * k, db.file, db.data_offset + start * k, end - start,
                                half, t))
            else:
                tasks.append((i, da, db, start, end, t))
    counts: Dict[int, int] = {}
    if c_pairs:
        # reading only: a count does not depend on the chunk, so read big ones
        got = kernel.count_pairs([p[1:] for p in c_pairs], max(st.chunk_elements, 1 << 16), jobs)  # type: ignore[union-attr]
        failed = set()
        for p, c in zip(c_pairs, got):
            if c is None:
                failed.add(p[0])
            else:
                counts[p[0]] = counts.get(p[0], 0) + c
        for i in sorted(failed):  # a file the kernel could not read: the engine says why
            counts.pop(i, None)
            da, db = extents_of(out[i])
            tasks.append((i, da, db, 0, da.size, out[i].threshold or 0.0))
    args = [(t[1], t[2], t[3], t[4], st, t[5]) for t in tasks]
    n = jobs if len(tasks) > 1 else 1
    if n > 1 and strategy == Strategy.FORK:
        got_py: Sequence[object] = run_shared(_count_task, args, n - 1)
    else:
        with ThreadWorkers(n, st.small_task_elements) as workers:
            got_py = list(workers.map(_count_task, args, [t[4] - t[3] for t in tasks]))
    for (i, *_rest), c in zip(tasks, got_py):
        counts[i] = counts.get(i, 0) + c  # type: ignore[operator]
    for i, c in counts.items():
        out[i] = with_changes(out[i], n_over=c) if shared else _set(out[i], c)
    return out


def _set(d: VarDiff, n_over: int) -> VarDiff:
    """``d`` (a record this comparison made, not yet shared) with its count, in place."""
    d.__dict__["n_over"] = n_over
    return d
