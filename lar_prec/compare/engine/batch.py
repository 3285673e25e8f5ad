"""Every pair of files in one pass: the C kernel's ``scan_start``/``scan_finish``.

A folder of tens of thousands of small vars costs per file, not per byte: reading each
header and title, then opening each file again for its values, and the Python around both.
:func:`prefetch` hands blocks of pairs of files of the same var id to ``scan_start``, which
reads each pair once on threads of its own while this thread files the block before: the
header (checked as :mod:`lar_prec.dumps.binary` checks it), the title and the values: a
file of at most :data:`MAX_FILE` bytes read whole, a bigger one mapped a window at a time
(``piece`` given), measured as :mod:`lar_prec.compare.engine.chunks` measures them (the same
kernel calls per chunk, the same ranges and order of accumulation: the same numbers), their
fields finished in C as :func:`~lar_prec.compare.engine.plan.value_fields` finishes them. A
folder of a few big vars then needs no workers to fork and no numpy (a 1 GB pair: ~15% less
time than the engine's forked workers). The headers go into the folders' caches (the pairing
reads them from there); the measured vars come back as their records. Whatever the kernel
leaves (a file it cannot read or that is not a dump, NaN/Inf, a dtype it does not take, an
identical int32 var whose squares' sum would round) is read and measured by the Python reader
and engine as before, which say what is wrong with a bad file.
"""
from __future__ import annotations

import operator
import os
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from lar_prec.compare.engine.hist import STAT_FIELDS
from lar_prec.compare.engine.plan import QUANTIZED_NOTE, join_notes, name_note
from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.engine.workers import DEFAULT_CHUNK
from lar_prec.compare.records import VarDiff, diff_from, diff_template
from lar_prec.compare.threshold import COLUMN_FIELDS, Threshold, judge, window
from lar_prec.dumps.binary import head_caches, layout_known
from lar_prec.dumps.dtypes import DTYPES
from lar_prec.dumps.titles import HEADER_SIZE
from lar_prec.dumps.folder import DumpFolder
from lar_prec.errors import DumpFormatError

#: files up to this size are read whole and measured in C; bigger ones are mapped a window at
#: a time (``piece`` given) or left to the Python engine
MAX_FILE = 1 << 20

#: while a block is read, a progress bar is moved this often (seconds)
POLL_SECONDS = 0.1

#: pairs per call: bounds the titles held in C at once and lets Ctrl-C in between
BLOCK = 1024

# the kernel's value handlers (_kernel.c: H_F32 ...): which dtypes it measures, and how;
# 0: header only (BFloat16, sub-byte, complex: the Python engine)
_HANDLER = {"Float32": 1, "Float16": 2, "Int8": 3, "QuantizedS8": 3, "Uint8": 4, "Byte": 4, "Quantized8Asymm": 4,
            "Int16": 5, "QuantizedS16": 5, "Uint16": 6, "Int32": 7, "QuantizedS32": 7, "Bool": 8}
_DTYPE_ROWS = tuple((d.code, d.bits, _HANDLER.get(d.name, 0)) for d in DTYPES.values())
#: every dtype header only (read_heads: no values measured)
_HEAD_ROWS = tuple((code, bits, 0) for code, bits, _h in _DTYPE_ROWS)


def available() -> bool:
    """Whether the C kernel with ``scan_start`` is built (and not turned off)."""
    return KERNEL is not None and hasattr(KERNEL, "scan_start")


def list_folder(path: str) -> Optional[Tuple[Dict[int, str], List[Tuple[str, bool]]]]:
    """A dump folder's listing by the kernel (:class:`DumpFolder`'s ``lister``): a folder of tens
    of thousands of files without a ``DirEntry`` each; None: the folder lists it itself."""
    lister = getattr(KERNEL, "list_dumps", None) if available() else None
    return lister(path) if lister is not None else None


#: the fields the kernel gives a measured var, in its order
_MEASURED = ("max_err", "max_abs_err", "max_rel_err", "mean_abs_err", "rmse", "cosine", "max_ulp", "worst_index",
             "worst_a", "worst_b", "scale", "n_over", "threshold", "n_diff") + STAT_FIELDS + ("band",)
#: a record's keys; the kernel's file_records writes the first eleven in this order (then the measured
#: fields as given): test_the_kernels_filing_is_the_python_filing holds the two filings equal
_KEYS = ("id", "name", "opr", "opr_type", "dtype", "shape", "inputs", "size", "status", "note", "scale_unknown") + _MEASURED
#: a measured var's COLUMN_FIELDS from its values (_KEYS, then n_nonfinite)
_ROW_INDEX = tuple((_KEYS + ("n_nonfinite",)).index(k) for k in COLUMN_FIELDS)
_COLUMN_ROW = operator.itemgetter(*_ROW_INDEX)
#: file_records' dtypes by header code: (dtype, bits, quantized, name)
_DTYPE_FILE = {code: (d, d.bits, bool(d.is_quantized), d.name) for code, d in DTYPES.items()}


def prefetch(fa: DumpFolder, fb: DumpFolder, chunk: int, fixed: Optional[Threshold],
             threads: int, ratio: float = 1.0, full: bool = False,
             rows: Optional[Dict[int, Tuple[Any, ...]]] = None, piece: int = 0,
             on_progress: Optional[Callable[[int, int], None]] = None) -> Dict[int, VarDiff]:
    """Read the files of every var id of A (and B's file of the same id) in one pass each,
    on ``threads`` threads: their headers and titles go into the folders' caches, and the
    records of the pairs measured in C are returned by id (``index`` 0 until the pairing
    places them), judged by ``fixed`` (None: an auto threshold, decided later).
    ``chunk``: the engine's chunk_elements; ``ratio``: the pass ratio float vars' statistics
    give their pass threshold at; ``full``: their relative and absolute error's too.
    ``rows``: filled with each measured var's :data:`~lar_prec.compare.threshold.COLUMN_FIELDS`
    by id, as its record is made (an auto threshold reads them, not the records).
    ``piece``: given (> 0), files too big to read whole are measured too, mapped a window at a
    time, their sums made per range of ``piece`` elements as the Python engine splits a var
    (the same numbers); 0: those are left to the engine. ``on_progress``: called as
    ``on_progress(done_bytes, total_bytes)`` while blocks are read, in bytes of both folders'
    files (the measured pairs' of all).

    Raises:
        DumpFormatError: a header the C reader took has a bad title or file name (as reading
            it in Python would).
    """
    files_a, files_b = fa.files(), fb.files()
    ids = list(files_a)
    measured: Dict[int, VarDiff] = {}
    count_over = fixed.value if fixed is not None else None
    # an auto threshold: each float var's errors inside the band (VarDiff.band) spare reading it again
    windows = (0.0, 0.0, 0.0, 0.0) if fixed is not None else (*window("Float32"), *window("Float16"))
    blocks = [ids[k : k + BLOCK] for k in range(0, len(ids), BLOCK)]
    start, finish = KERNEL.scan_start, KERNEL.scan_finish  # type: ignore[union-attr]

    def read(block: List[int]) -> object:
        pb: List[Optional[str]] = [files_b.get(v) for v in block]
        return start([files_a[v] for v in block], pb, _DTYPE_ROWS, MAX_FILE, chunk, count_over, threads, ratio, full,
                     windows, piece > 0, piece)

    # for a progress bar only: the files' sizes (headers and titles included)
    total = _sizes(files_a, files_b) if on_progress is not None else 0
    done = 0
    # the next block is read by the kernel's own threads (system calls and comparing, no
    # Python) while this thread files the last one (Python): both cores busy
    ahead = deque(read(b) for b in blocks[:2])
    for k, block in enumerate(blocks):
        job = ahead.popleft()
        if on_progress is not None:  # a block of big vars takes seconds: the bar moves meanwhile
            while True:
                ready, now = KERNEL.scan_poll(job, POLL_SECONDS)  # type: ignore[union-attr]
                on_progress(min(done + now, total), total)
                if ready:
                    break
        got = finish(job)
        if k + 2 < len(blocks):  # two blocks ahead: the threads never wait for this one
            ahead.append(read(blocks[k + 2]))
        _file(fa, fb, block, got, fixed, measured, rows)
        if on_progress is not None:
            done += sum(_measured_bytes(g) for g in got)
    return measured


def _sizes(files_a: Dict[int, str], files_b: Dict[int, str]) -> int:
    """The bytes of the two folders' files (a progress bar's total; 0 for a file gone)."""
    total = 0
    for files in (files_a, files_b):
        for path in files.values():
            try:
                total += os.stat(path).st_size
            except OSError:
                pass
    return total


def _measured_bytes(got: Tuple[Any, ...]) -> int:
    """The sizes of a read pair's two files (0 unless measured), as the kernel's scan_poll counts."""
    ha, hb, _same, fields = got
    return 0 if fields is None else ha[3] + hb[3]


def _note(folder: DumpFolder, vid: int, head: Tuple[Any, ...]) -> Optional[Tuple[Any, ...]]:
    """:meth:`~lar_prec.dumps.folder.DumpFolder.note_head` of the kernel's header tuple (dtype
    code, shape, size, file size, title, parsed title, title length): the header kept, its
    dump made on first use; None where the folder made (and cached) the dump now.

    Raises:
        DumpFormatError: as ``folder[vid]`` would.
    """
    return folder.note_head(vid, DTYPES[head[0]], head[1], head[2], head[3], head[4], head[6], head[5])


def _file(fa: DumpFolder, fb: DumpFolder, block: List[int], got: list, fixed: Optional[Threshold],
          measured: Dict[int, VarDiff], rows: Optional[Dict[int, Tuple[Any, ...]]] = None) -> None:
    """File one block's headers in the folders' caches and its measured vars' records in
    ``measured``: the usual var by the kernel (``file_records``: a tenth of the time, the same
    kept headers and records), the rest here."""
    fast = getattr(KERNEL, "file_records", None)
    if fast is None:
        for v, item in zip(block, got):
            _file_one(fa, fb, v, item, fixed, measured, rows)
        return
    heads_a, _ = fa.kept_heads()
    _, like_b = fb.kept_heads()
    shapes, texts = head_caches()
    for item in got:  # a layout text met for the first time is checked here (the kernel files what it knows)
        ha = item[0]
        if ha is not None:
            p = ha[5]
            if p is not None and p[3] not in texts:
                layout_known(p[2], p[3])
    left, made = fast(block, got, _DTYPE_FILE, diff_template(), _KEYS, VarDiff, heads_a, like_b, shapes, texts,
                      HEADER_SIZE, "ok", "", measured, rows, _ROW_INDEX, 0)
    if fixed is not None:
        for v in made:
            d = measured[v]
            d.__dict__.update(judge(d, fixed))  # a record being made, not yet shared
    for i in left:
        _file_one(fa, fb, block[i], got[i], fixed, measured, rows)


def _file_one(fa: DumpFolder, fb: DumpFolder, v: int, item: Tuple[Any, ...], fixed: Optional[Threshold],
              measured: Dict[int, VarDiff], rows: Optional[Dict[int, Tuple[Any, ...]]]) -> None:
    """:func:`_file` of one var (what the kernel leaves, and everything without it)."""
    ha, hb, same, fields = item
    if ha is None:
        return
    # most headers are kept as read, their dumps made only if asked for (tens of
    # thousands of them, and the folders let go of them once the records are made)
    h = _note(fa, v, ha)
    if hb is None:
        return
    if same:
        fb.cache_like(v, h if h is not None else fa[v])
        hb_kept = None
    else:
        hb_kept = _note(fb, v, hb)
    if fields is None:
        return
    # the record the Python engine would make (plan.var_job, value_fields), judged
    if h is not None:  # BinaryDump.names() and input_ids of the fields the reader delimited
        dt, shape, size, p = h[0], h[1], h[2], h[6]
        name, owner, opr_type, inputs = p[8], p[5], p[6], p[15]
    else:
        da = fa[v]
        dt, shape, size, inputs = da.dtype, da.shape, da.size, da.input_ids
        name, owner, opr_type = da.names()
    note = "" if same else name_note(name, hb_kept[6][8] if hb_kept is not None else fb[v].var.name)
    quantized = dt.is_quantized
    if quantized:
        note = join_notes(note, QUANTIZED_NOTE)
    values = (v, name, owner, opr_type, dt.name, shape, inputs, size, "ok", note, quantized) + fields
    d = diff_from(_KEYS, values)
    if fixed is not None:
        d.__dict__.update(judge(d, fixed))  # a record being made, not yet shared
    elif rows is not None:
        rows[v] = _COLUMN_ROW(values + (0,))  # n_nonfinite: 0 (the kernel leaves NaN and Inf)
    measured[v] = d


def read_heads(fa: DumpFolder, fb: DumpFolder, pairs: Sequence[Tuple[int, Optional[int]]], threads: int = 2) -> None:
    """Put the headers and titles of these files (A's var id, B's or None) in the folders'
    caches, read by the kernel's threads in one pass: the dump-only recheck asks for a few
    hundred vars and their inputs after the folders let go of theirs (~50 us each by the Python
    reader, a tenth of comparing 20,000 small vars under the auto rule). A file this cannot take
    or whose title is bad is left to the folders' own reader, which says what is wrong with it
    when it is asked for."""
    if not available() or not pairs:
        return
    files_a, files_b = fa.files(), fb.files()
    todo = [(a, b if b in files_b else None) for a, b in dict.fromkeys(pairs) if a in files_a]
    job = KERNEL.scan_start([files_a[a] for a, _ in todo], [files_b[b] if b is not None else None for _, b in todo],  # type: ignore[union-attr]
                            _HEAD_ROWS, MAX_FILE, DEFAULT_CHUNK, None, threads, 1.0, False, (0.0, 0.0, 0.0, 0.0),
                            False, 0)
    for (a, b), (ha, hb, same, _fields) in zip(todo, KERNEL.scan_finish(job)):  # type: ignore[union-attr]
        try:
            if ha is not None:
                h = _note(fa, a, ha)
                kept: Any = h if h is not None else fa[a]
            else:
                kept = None
            if hb is not None and b is not None:
                if same and a == b and kept is not None:
                    fb.cache_like(b, kept)
                else:
                    _note(fb, b, hb)
        except DumpFormatError:
            continue
