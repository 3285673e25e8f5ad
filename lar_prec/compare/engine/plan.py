"""Planning and measuring: what comparing each pair of dumps takes, and running it.

A :class:`Job` per entry of a :class:`~lar_prec.pairing.Pairing` is decided from the headers
(missing, shape or dtype mismatch: ``done``) or split into element ranges (``pieces``) that
the engine measures, in this process, on threads or on forked workers
(:func:`measure_forked`, :func:`measure_threaded`). :func:`finish_fields` turns a job's
results into the fields of its :class:`~lar_prec.compare.VarDiff`; compare builds the record.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from lar_prec.compare.engine.chunks import QUIET, Acc, exact_range, float_range
from lar_prec.compare.engine.io import Extent
from lar_prec.compare.engine.scan import acc_fields, kernel_for, merge, raw_diff_bytes
from lar_prec.compare.engine.workers import EngineSettings, ThreadWorkers, run_shared
from lar_prec.dumps.binary import BinaryDump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.pairing import Pairing
from lar_prec.compare.records import VarDiff

#: ``on_progress(done_bytes, total_bytes)``, called on the thread that runs the comparison
ProgressHook = Callable[[int, int], None]


class _Base:
    """Only its instance dict is used: a key-sharing dict of the base fields, copied per var."""

    def __init__(self) -> None:
        self.id = self.name = self.opr = self.opr_type = self.dtype = self.shape = self.inputs = self.size = self.index = None


_BASE_KEYS = ("id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "size", "index")
#: every job keeps its base fields until its var is compared: a copy of this key-sharing
#: dict, overwritten key by key, is a third of the size of a dict(...) of them
_BASE_DICT: Dict[str, object] = _Base().__dict__


def base_fields(da: Optional[BinaryDump], db: Optional[BinaryDump], index: int) -> Dict[str, object]:
    """The fields every VarDiff of this var starts from: A's header (B's for a var only in B)."""
    d = da if da is not None else db
    assert d is not None  # internal: at least one side exists
    v = d.var
    base = _BASE_DICT.copy()
    base.update(zip(_BASE_KEYS, (v.id, v.name, v.owner, v.opr_type, d.dtype.name, tuple(d.shape), d.input_ids, d.size, index)))
    return base


@dataclass
class Job:
    """One var to compare: either already decided from the headers (``done``) or a value
    comparison split into element ranges (``pieces``) that can run in parallel. It holds
    the two files' :class:`~lar_prec.engine_io.Extent`, not the dumps (nor their titles)."""

    base: Dict[str, object]
    done: Optional[Dict[str, object]] = None
    da: Optional[Extent] = None
    db: Optional[Extent] = None
    kind: str = ""  # "float" | "exact" | "mismatch" | "raw"
    pieces: Tuple[Tuple[int, int], ...] = ()
    nbytes: int = 0
    #: the finished record, when it was made with the job (the batch reader's vars)
    diff: Optional[VarDiff] = None

    def release(self) -> None:
        """Let go of the extents and fields once the var is finished (its pieces stay)."""
        self.base = {}
        self.done = self.da = self.db = self.diff = None


def plan(da: Extent, db: Extent, base: Dict[str, object], piece: int) -> Job:
    """Decide from the headers what comparing two dumps of one var takes."""
    nbytes = da.nbytes + db.nbytes
    if da.shape != db.shape:
        dtype_b = db.dtype.name if db.dtype.name != da.dtype.name else None
        return Job(base, done=dict(base, status="shape_mismatch", shape_b=db.shape, dtype_b=dtype_b), nbytes=nbytes)
    if da.dtype.code != db.dtype.code:
        if not (da.dtype.decodable and db.dtype.decodable) or "complex" in (da.dtype.kind, db.dtype.kind):
            return Job(base, done=dict(base, status="dtype_mismatch", dtype_b=db.dtype.name), nbytes=nbytes)
        kind = "mismatch"
    elif not da.dtype.decodable or da.dtype.kind == "complex":
        return Job(base, da=da, db=db, kind="raw", pieces=((0, da.size),), nbytes=nbytes)
    else:
        kind = "float" if da.dtype.kind == "float" else "exact"
    n = da.size
    step = max(1, piece)
    pieces = tuple((i, min(n, i + step)) for i in range(0, n, step)) or ((0, 0),)
    return Job(base, da=da, db=db, kind=kind, pieces=pieces, nbytes=nbytes)


def var_job(entry: Tuple[Optional[int], Optional[int]], fa: DumpFolder, fb: DumpFolder, index: int, piece: int) -> Job:
    """The job of one entry of a :class:`Pairing` (missing vars are decided right away)."""
    ida, idb = entry
    da = fa[ida] if ida is not None else None
    db = fb[idb] if idb is not None else None
    base = base_fields(da, db, index)
    if da is None or db is None:
        side = "b" if da is None else "a"
        where = fb.path if da is None else fa.path
        done = dict(base, status="missing", only_in=side, note=f"only in {side.upper()} ({where})")
        return Job(base, done=done, nbytes=(da or db).nbytes)  # type: ignore[union-attr]
    if da.title != db.title:  # same title: same name, B's not parsed
        note = name_note(da.var.name, db.var.name)
        if note:
            base["note"] = note
    return plan(Extent.of(da), Extent.of(db), base, piece)


def name_note(name_a: str, name_b: str) -> str:
    """The note of a var paired by id whose name differs in B ("" when it does not)."""
    return f"name differs: B calls it {name_b!r}" if name_a != name_b else ""


def run_piece(job: Job, k: int, st: EngineSettings, count_over: Optional[float], full: bool = False) -> object:
    """Measure piece ``k`` of a job (an :class:`~lar_prec.engine.Acc`, or for a raw
    comparison the number of differing bytes); ``full``: float vars' relative and absolute
    error statistics too."""
    assert job.da is not None and job.db is not None  # internal: done jobs have no pieces
    start, end = job.pieces[k]
    kernel = kernel_for(st)
    if job.kind == "float":
        return float_range(job.da, job.db, start, end, st, count_over, kernel, full)
    if job.kind == "raw":
        return raw_diff_bytes(job.da, job.db, st.chunk_elements)
    return exact_range(job.da, job.db, start, end, st, job.kind == "mismatch", kernel)


def finish_fields(job: Job, parts: Sequence[object], ratio: float = 1.0) -> Dict[str, object]:
    """The VarDiff fields of a job from the results of its pieces, in order, with the notes
    a report shows (raw bytes, dtype mismatch, quantized); ``ratio``: the pass ratio of the
    statistics' pass threshold."""
    if job.done is not None:
        return job.done
    da, db = job.da, job.db
    assert da is not None and db is not None  # internal
    if job.kind == "raw":
        ndiff = parts[0]
        note = f"{da.dtype.name} values are not decoded; raw bytes compared ({ndiff} byte(s) differ)"
        fields = dict(job.base, status="ok", n_diff=ndiff, n_over=ndiff)
        fields["note"] = join_notes(fields.get("note"), note)
    elif job.kind in ("float", "exact"):
        return value_fields(job.base, merge(parts), da.shape, job.kind, da.dtype.is_quantized, ratio)  # type: ignore[arg-type]
    else:
        acc = merge(parts)  # type: ignore[arg-type]
        fields = acc_fields(acc, da.shape, dict(job.base, status="ok"))
        if job.kind == "mismatch":
            fields.update(status="dtype_mismatch", dtype_b=db.dtype.name)
    if fields["status"] == "dtype_mismatch":
        extra = f"dtype {da.dtype.name} in A, {db.dtype.name} in B"
        if fields.get("max_err") is not None:
            extra += ", values compared as numbers"
        fields["note"] = join_notes(fields.get("note"), extra)
    if da.dtype.is_quantized and fields["status"] not in ("dtype_mismatch", "missing"):
        fields.update(scale_unknown=True, note=join_notes(fields.get("note"), QUANTIZED_NOTE))
    return fields


def value_fields(base: Dict[str, object], acc: Acc, shape: Tuple[int, ...], kind: str, quantized: bool,
                 ratio: float = 1.0) -> Dict[str, object]:
    """The VarDiff fields of a var of one dtype on both sides compared as floats (``kind``
    "float") or exactly ("exact"), from its whole accumulator: ``base`` (its job's, used once)
    filled in and returned."""
    base["status"] = "ok"
    fields = acc_fields(acc, shape, base, ratio)
    if kind == "exact":
        fields["n_diff"] = fields["n_over"] = acc.n_diff
    if quantized:
        fields["scale_unknown"] = True
        fields["note"] = join_notes(fields.get("note"), QUANTIZED_NOTE)
    return fields


#: the note of a quantized var (its raw integers compared; the scale is not in the dump)
QUANTIZED_NOTE = "scale unknown: raw quantized integers compared exactly"


def join_notes(*notes: object) -> str:
    """The non-empty notes, joined by "; "."""
    return "; ".join(str(x) for x in notes if x)


def plan_folders(fa: DumpFolder, fb: DumpFolder, pairing: Pairing, keep: bool,
                 measured: Optional[Dict[int, VarDiff]] = None) -> Tuple[List[Job], Dict[int, Tuple[Extent, Extent]]]:
    """One job per entry of ``pairing``, reading B's headers once. The folders forget each
    header as its job takes it (tens of thousands of vars: only the jobs hold extents, until
    compared); with ``keep`` the extents of value-compared vars are also returned by A's id,
    for the second pass of an auto threshold. ``measured``: vars of the same id on both
    sides the batch reader (:mod:`lar_prec.compare.engine.batch`) measured and made the
    records of, whose jobs are finished here."""
    plans: List[Job] = []
    kept: Dict[int, Tuple[Extent, Extent]] = {}
    measured = measured or {}
    for i, entry in enumerate(pairing.order):
        r = measured.get(entry[0]) if entry[0] == entry[1] else None  # type: ignore[arg-type]
        j = var_job(entry, fa, fb, i, 1 << 62) if r is None else _measured_job(fa[entry[0]], fb, i, r, keep)  # type: ignore[index]
        plans.append(j)
        if keep and j.kind in ("float", "mismatch") and j.da is not None and j.db is not None:
            kept[entry[0]] = (j.da, j.db)  # type: ignore[index]
        if entry[0] is not None:
            fa.forget(entry[0])
        if entry[1] is not None:
            fb.forget(entry[1])
    return plans, kept


def _measured_job(da: BinaryDump, fb: DumpFolder, index: int, d: VarDiff, keep: bool) -> Job:
    """The finished job of a var the batch reader measured and made the record of (same id,
    dtype and shape on both sides, so the same bytes: a value comparison :func:`plan` would
    give); with ``keep`` it holds the extents (a second pass may read the values again)."""
    d.__dict__["index"] = index  # its place in the order, known now; the record is not shared yet
    kind = "float" if da.dtype.kind == "float" else "exact"
    if not keep:
        return Job({}, done=d.__dict__, kind=kind, nbytes=2 * da.nbytes, diff=d)
    return Job({}, done=d.__dict__, da=Extent.of(da), db=Extent.of(fb[da.var_id]), kind=kind, nbytes=2 * da.nbytes, diff=d)


def measure_forked(plans: List[Job], tasks: List[tuple], finish: Callable[[int, Sequence[object]], None], n_workers: int,
                    st: EngineSettings, on_progress: Optional[ProgressHook], total: int) -> None:
    """Run ``tasks`` on this process and ``n_workers - 1`` forked ones; progress is
    reported here, on the calling thread, as results arrive."""
    # byte share of each task, for progress (a var's bytes spread over its pieces)
    share = [t[0].nbytes / len(t[0].pieces) for t in tasks]
    task_var: List[int] = []
    for i, j in enumerate(plans):
        if j.done is not None:
            finish(i, [])
        else:
            task_var.extend([i] * len(j.pieces))
    parts: Dict[int, List[Tuple[int, object]]] = {}
    seen = [0.0]

    def arrived(t: int, r: object) -> None:
        # a var is finished as soon as all its pieces are in, whichever process ran them
        i = task_var[t]
        got = parts.setdefault(i, [])
        got.append((t, r))
        if len(got) == len(plans[i].pieces):
            del parts[i]
            got.sort(key=lambda x: x[0])
            finish(i, [x[1] for x in got])
        if on_progress is not None:
            seen[0] += share[t]
            on_progress(int(seen[0]), total)

    # workers take the big pieces, this process the small ones (and big ones from the back):
    # a worker that touched the jobs of thousands of small vars would copy most of this
    # process's pages (20,000 small vars: 150 MB for the two, not 90) for no gain. With the C
    # kernel, workers take only float32 and float16 pieces, which need no numpy: forked before
    # this process imports numpy, they work while it does, and never import it.
    kernel = kernel_for(st)
    sizes = [t[0].pieces[t[1]][1] - t[0].pieces[t[1]][0] for t in tasks]
    if kernel is None:
        import numpy  # noqa: F401  # before the fork: the workers need it and inherit it
    forked = [sizes[t] >= st.small_task_elements and (kernel is None or (
        tasks[t][0].kind == "float" and tasks[t][0].da.dtype.name in ("Float32", "Float16"))) for t in range(len(tasks))]
    order = [t for t in range(len(tasks)) if forked[t]]
    n_big = len(order)
    order += [t for t in range(len(tasks)) if not forked[t]]
    run_shared(run_piece, [tasks[t] for t in order], n_workers - 1 if n_big else 0,
               sink=lambda k, r: arrived(order[k], r), forked_limit=n_big, local=QUIET)
    if on_progress is not None:
        on_progress(total, total)


def measure_threaded(plans: List[Job], tasks: List[tuple], finish: Callable[[int, Sequence[object]], None], n_workers: int,
                      st: EngineSettings, on_progress: Optional[ProgressHook], total: int) -> None:
    """Run ``tasks`` here (``n_workers == 1``) or on a thread pool, finishing vars in order."""
    done = 0
    sizes = [t[0].pieces[t[1]][1] - t[0].pieces[t[1]][0] for t in tasks]
    with ThreadWorkers(n_workers, st.small_task_elements) as workers, QUIET:
        results = workers.map(run_piece, tasks, sizes)
        for i, j in enumerate(plans):
            n = len(j.pieces) if j.done is None else 0
            done += j.nbytes
            finish(i, [next(results) for _ in range(n)])
            if on_progress is not None:
                on_progress(done, total)


