"""The batch reader (lar_prec/compare/engine/batch.py, ``scan_pairs`` in _kernel.c) against the
Python reader and engine it stands in for.

It reads each pair of files once, in C on threads: headers, titles and small vars' values. It
must give exactly what the Python path gives (the same kernel calls per chunk, the same order
of accumulation: every field equal, not close), parse a title only where the Python parser
would read it the same way, and leave every file it cannot take to the Python reader, so that a
bad file is reported with the same message.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compare_helpers import GraphDump, dtype_corners, var_info
from lar_prec.compare import folders as folders_mod
from lar_prec.compare.engine import batch
from lar_prec.compare.engine.workers import EngineSettings
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.threshold import parse_threshold
from lar_prec.dumps.binary import dump_file_name, read_binary_dump, write_binary_dump
from lar_prec.dumps.dtypes import DTYPES
from lar_prec.dumps.titles import VarInfo, _input_ids_at, _parse_head, _TitleError, contiguous_layout, format_title, info_from_fields
from lar_prec.errors import DumpFormatError

needs_batch = pytest.mark.skipif(not batch.available(), reason="the C kernel is not built (or LAR_PREC_NO_KERNEL=1)")
PYTHON = EngineSettings(batch=False)


def both(dir_a: Path, dir_b: Path, **kw) -> tuple:
    return compare_folders(dir_a, dir_b, **kw), compare_folders(dir_a, dir_b, settings=PYTHON, **kw)


def assert_identical(cb, cp) -> None:
    assert cb.ids == cp.ids
    assert cb.threshold == cp.threshold
    assert cb.notes == cp.notes
    for x, y in zip(cb, cp):
        # band: what the batch reader keeps to count above an auto threshold without reading
        # again (the engine reads again): not a result
        assert {**dataclasses.asdict(x), "band": None} == {**dataclasses.asdict(y), "band": None}, x.id


@needs_batch
@pytest.mark.megengine
@pytest.mark.parametrize("case", ["resnet", "attention", "fp16", "int_ops", "quantized"])
def test_real_dumps_identical_to_the_python_engine(lar_dump, case):
    naive, default = lar_dump(case, "naive"), lar_dump(case, "default")
    for thr in ("auto", 1e-6, 0.0):
        for chunk in (None, 1000):  # 1000: float32 vars over several kernel calls
            assert_identical(*both(naive, default, threshold=thr, chunk_elements=chunk, jobs=2))


@needs_batch
@pytest.mark.megengine
def test_every_var_measured_by_the_batch_reader_needs_no_jobs(lar_dump, monkeypatch):
    # every var of these is small and of a dtype the kernel measures: under a fixed threshold
    # the records come straight from the batch reader (fp16 and quantized: per-dtype
    # thresholds, n_over recounted), and are the Python engine's
    pairs = {case: (lar_dump(case, "naive"), lar_dump(case, "default")) for case in ("resnet", "fp16", "quantized")}
    expected = {(case, thr): compare_folders(*pair, threshold=thr, settings=PYTHON)
                for case, pair in pairs.items() for thr in (1e-6, 0.0)}

    def no_jobs(*args, **kw):
        raise AssertionError("jobs planned for vars the batch reader measured")

    monkeypatch.setattr(folders_mod, "plan_folders", no_jobs)
    for (case, thr), cp in expected.items():
        assert_identical(compare_folders(*pairs[case], threshold=thr), cp)


@needs_batch
def test_every_dtype_and_corner_identical_to_the_python_engine(tmp_path):
    a, b = dtype_corners(tmp_path)
    for thr in ("auto", 1e-3, 0.0):
        for chunk in (None, 7, 32768):
            for jobs in (1, 2):
                assert_identical(*both(a, b, threshold=thr, chunk_elements=chunk, jobs=jobs))
    measured = batch.prefetch(*_folders(a, b), 1 << 15, parse_threshold(1e-3), 2)
    # what it measures and what it leaves to the Python engine
    assert {1, 2, 5, 6, 8, 9, 10, 11, 12, 13, 18, 21, 22} <= set(measured)
    assert not {3, 4, 7, 14, 15, 16, 17, 19, 20} & set(measured)
    # a float32 var over MAX_FILE too, read a window at a time, when asked (piece > 0)
    streamed = batch.prefetch(*_folders(a, b), 1 << 15, parse_threshold(1e-3), 2, piece=1 << 21)
    assert set(streamed) == set(measured) | {15}


@needs_batch
def test_big_vars_read_a_window_at_a_time_identical_to_the_python_engine(tmp_path):
    # vars over MAX_FILE: float32 (several ranges of piece_elements, several windows), float16,
    # integers that differ and identical ones: the batch reader streams them all, in ranges
    # split as the Python engine splits them (with one job too), so every field is the same
    rng = np.random.default_rng(11)
    a, b = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    f = rng.standard_normal(1_300_000).astype(np.float32) * 3
    a.add(1, f)
    b.add(1, f + rng.standard_normal(f.size).astype(np.float32) * np.float32(1e-5), inputs=[])
    h = rng.standard_normal(700_000).astype(np.float16)
    a.add(2, h, inputs=[1])
    b.add(2, (h.astype(np.float32) * np.float32(1.001)).astype(np.float16), inputs=[1])
    u = rng.integers(0, 255, 1_500_000).astype(np.uint8)
    u2 = u.copy()
    u2[::1000] ^= 1
    a.add(3, u, inputs=[2])
    b.add(3, u2, inputs=[2])
    i = rng.integers(-5000, 5000, 400_000).astype(np.int32)
    a.add(4, i, inputs=[3])
    b.add(4, i, inputs=[3])
    da, db = tmp_path / "a", tmp_path / "b"
    for piece in (1 << 21, 300_000):
        for jobs in (1, 2):
            st = dataclasses.replace(PYTHON, piece_elements=piece)
            for thr in ("auto", 1e-4):
                got = compare_folders(da, db, threshold=thr, jobs=jobs, settings=dataclasses.replace(st, batch=True))
                assert_identical(got, compare_folders(da, db, threshold=thr, jobs=jobs, settings=st))
        assert set(batch.prefetch(*_folders(da, db), 1 << 15, None, 2, piece=piece)) == {1, 2, 3, 4}
    assert got[3].status == "divergent" and got[3].n_diff == 1500 and got[4].status == "ok"
    # a progress bar is told while the kernel's threads read (scan_poll), never past the total
    seen = []
    compare_folders(da, db, on_progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] > 0 and all(0 <= d <= t for d, t in seen)


def _folders(a: Path, b: Path) -> tuple:
    from lar_prec.dumps.folder import DumpFolder

    return DumpFolder(a), DumpFolder(b)


@needs_batch
def test_bad_files_are_reported_as_the_python_reader_reports_them(tmp_path):
    a, b = dtype_corners(tmp_path)
    cases = {
        "truncated": lambda p: p.write_bytes(p.read_bytes()[:-3]),
        "short header": lambda p: p.write_bytes(p.read_bytes()[:30]),
        "bad dtype": lambda p: p.write_bytes(p.read_bytes()[:4] + (77).to_bytes(4, "little") + p.read_bytes()[8:]),
        "title id": lambda p: p.write_bytes(p.read_bytes().replace(b"{id:2,", b"{id:9,", 1)),
        "a folder": lambda p: (p.unlink(), p.mkdir()),
    }
    for what, damage in cases.items():
        for side in ("a", "b"):
            work = tmp_path / f"{what}-{side}"
            shutil.copytree(a, work / "a")
            shutil.copytree(b, work / "b")
            damage(work / side / dump_file_name(2))
            seen = []
            for st_ in (EngineSettings(), PYTHON):
                try:
                    c = compare_folders(work / "a", work / "b", threshold=1e-3, settings=st_)
                    seen.append((c.notes, [(d.id, d.status, d.note) for d in c]))
                except DumpFormatError as e:
                    seen.append(str(e))
            assert seen[0] == seen[1], (what, side)
            if what == "a folder":  # not a dump: a stray entry, and var 2 missing on that side
                assert "not dumps ignored" in " ".join(seen[0][0])
            else:
                assert dump_file_name(2) in seen[0], (what, side)


# ----------------------------------------------------------------------------- titles

# ASCII names with the grammar's own punctuation (the C parser takes pure-ASCII titles only)
_NAME = st.text(alphabet=st.sampled_from(list("{}(),:=[] \"'<>@slotidnameowner_0123456789-")), max_size=24)
_RT_CODES = sorted(c for c, d in DTYPES.items() if d.storage is not None)


@st.composite
def _infos(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), max_size=4)))
    dtype = DTYPES[draw(st.sampled_from(_RT_CODES))].name
    opr_id = draw(st.integers(0, 10**6))
    return VarInfo(
        id=draw(st.integers(0, 2**40)), name=draw(_NAME),
        owner=draw(_NAME) + draw(st.sampled_from([f"[{opr_id}]", "", "[x]", "[]"])),
        opr_type=draw(st.sampled_from(["ConvolutionForward", "Elemwise", "opr::X_1", ""])), opr_id=opr_id, dtype=dtype,
        shape=shape, layout=contiguous_layout(shape, dtype) if draw(st.booleans()) else None, slot=draw(st.integers(0, 3)),
        comp_node=draw(st.sampled_from(['CompNode("cpu0:0" from "cpu0:0")', "invalid", ""])),
        storage=draw(st.sampled_from("sd")), shape_infer=draw(st.sampled_from([1, 4, -2])),
        value_infer=draw(st.sampled_from([1, 8, 10**19])),
    )


_JUNK = ["", ", slot:0, x, s, 4, 1}", " 1={id:5, layout:{2(1) Float32}", "}, name:", "{", " owner_opr_inputs=", "0=",
         ", slot:99999999999999999999, c, s, 1, 1}", "\u00e9"]


@needs_batch
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(var=_infos(), inputs=st.lists(_infos(), max_size=4), k=st.one_of(st.none(), st.integers(0, 3)),
       cut=st.integers(0, 400), junk=st.sampled_from(_JUNK))
def test_c_title_parse_agrees_with_the_python_parser(tmp_path, var, inputs, k, cut, junk):
    title = format_title(var, inputs, input_index=k)
    for t in (title, title[:cut] + junk + title[cut:]):
        path = tmp_path / "000001"
        write_binary_dump(path, np.zeros(3, np.float32), t, "Float32")
        head = batch.KERNEL.scan_pairs([os.fsencode(path)], [None], batch._DTYPE_ROWS, batch.MAX_FILE, 8, None, 1)[0][0]
        assert head is not None and head[4] == t
        parsed = head[5]
        try:
            v, at, idx = _parse_head(t)
            ids = _input_ids_at(t, at)
        except _TitleError:  # the Python parser refuses it: C left it, or its layout is refused when read
            if parsed is not None:
                with pytest.raises(_TitleError):
                    info_from_fields(*parsed[1:14], 0)
            continue
        if parsed is None:
            continue  # left to Python (non-ASCII, a long number, the step-by-step path)
        want = (idx, v.id, v.layout is not None, v.layout if v.layout is not None else parsed[3], v.dtype, v.owner,
                v.opr_type, v.opr_id, v.name, v.slot, v.comp_node, v.storage, v.shape_infer, v.value_infer, at, ids)
        assert tuple(parsed) == want, t


@needs_batch
def test_usual_titles_are_parsed_in_c(tmp_path):
    """The titles MegEngine writes (ASCII, ids and flags of a few digits) do not fall back."""
    g = GraphDump(tmp_path)
    g.add(1, np.zeros(4, np.float32), opr_type="Host2DeviceCopy")
    g.add(2, np.zeros(4, np.float32), inputs=[1])
    g.add(3, np.zeros(4, np.float32), inputs=[1, 2])
    paths = [os.fsencode(tmp_path / dump_file_name(v)) for v in (1, 2, 3)]
    got = batch.KERNEL.scan_pairs(paths, [None] * 3, batch._DTYPE_ROWS, batch.MAX_FILE, 8, None, 2)
    assert [h[0][5][-1] for h in got] == [(), (1,), (1, 2)]
    assert got[2][0][5][8] == var_info(3, (4,)).name


@needs_batch
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=0, max_size=200), code=st.sampled_from(sorted(DTYPES)), n=st.integers(0, 9))
def test_any_header_is_read_as_the_python_reader_reads_it_or_left_to_it(tmp_path, data, code, n):
    title = format_title(var_info(1, (n or 1,)))
    raw = np.zeros(n or 1, np.float32).tobytes()
    good = (len(title)).to_bytes(4, "little") + code.to_bytes(4, "little") + (7).to_bytes(4, "little")
    good += (n or 1).to_bytes(4, "little") + bytes(24) + title.encode() + raw[: DTYPES[code].nbytes(n or 1)]
    for blob in (good, data, good[: len(data)], data + good[len(data):]):
        path = tmp_path / "000001"
        path.write_bytes(blob)
        head = batch.KERNEL.scan_pairs([os.fsencode(path)], [None], batch._DTYPE_ROWS, batch.MAX_FILE, 8, None, 1)[0][0]
        if head is None:
            continue  # left to the Python reader
        d = read_binary_dump(path)  # C took it: Python must read it too, the same way
        assert (d.dtype.code, d.shape, d.size, d.data_offset + d.nbytes, d.title) == tuple(head[:5])


@needs_batch
def test_b_records_made_from_a_when_asked_and_name_pairing_still_reads_them(tmp_path):
    """A's header and title stand for B's where they are the same bytes (no copy held); a
    folder pair that pairs by name (renumbered vars) reads its names from what the batch read."""
    from lar_prec.dumps.folder import DumpFolder

    a, b = dtype_corners(tmp_path)
    fa, fb = DumpFolder(a), DumpFolder(b)
    batch.prefetch(fa, fb, 1 << 15, parse_threshold(1e-3), 2)
    assert fb.title(1) == fa.title(1) and fb.title(18) != fa.title(18)
    d = fb[1]
    assert d.file == str(b / dump_file_name(1)) and d.title == fa[1].title and d.var == read_binary_dump(d.file).var
    # a renumbered copy of B: paired by name, every pair found as without the batch reader
    renum = tmp_path / "renum"
    renum.mkdir()
    for p in sorted(b.iterdir()):
        d = read_binary_dump(p)
        write_binary_dump(renum / dump_file_name(d.id + 1000), d.array() if d.dtype.name != "BFloat16" else
                          np.frombuffer(p.read_bytes()[d.data_offset:], np.uint16),
                          d.title.replace(f"{{id:{d.id},", f"{{id:{d.id + 1000},", 1), d.dtype.code)
    got = [compare_folders(a, renum, threshold=1e-3, pairing=m, settings=s) for m in ("auto", "name")
           for s in (EngineSettings(), PYTHON)]
    assert all(g.pairing == "name" for g in got) and len(got[0].pairs) >= 15
    for g in got[1:]:
        assert [dataclasses.asdict(x) for x in g] == [dataclasses.asdict(x) for x in got[0]]


@needs_batch
@pytest.mark.parametrize("threshold", [1e-3, None])
def test_kept_headers_answer_as_the_folders_own_reader(tmp_path, threshold):
    """The batch reader keeps each header it read (the dump is made on first use): a folder's
    inputs, titles and dumps are, var by var, what a fresh folder reads from the files, asked
    before and after the dumps are made, on both sides (B's from A's where the same bytes)."""
    from lar_prec.dumps.folder import DumpFolder

    a, b = dtype_corners(tmp_path)
    fa, fb = DumpFolder(a), DumpFolder(b)
    batch.prefetch(fa, fb, 1 << 15, parse_threshold(threshold) if threshold else None, 2,
                   rows={} if threshold is None else None)
    assert fb.noted_like(fa)  # A's header stands for B's same bytes: names compared without a call per var
    ra, rb = DumpFolder(a), DumpFolder(b)
    fields = ("file", "title", "input_of", "input_index", "dtype", "shape", "size", "data_offset", "nbytes", "var_id",
              "input_ids", "var", "inputs")
    for got, ref in ((fa, ra), (fb, rb)):
        assert got.ids == ref.ids  # the order, from the inputs the kept headers hold
        for v in ref.ids:
            assert (got.title(v), got.inputs_of(v)) == (ref.title(v), ref.inputs_of(v)), v
            assert [getattr(got[v], k) for k in fields] == [getattr(ref[v], k) for k in fields], v
            assert (got.title(v), got.inputs_of(v)) == (ref.title(v), ref.inputs_of(v)), v
    fa.forget_all()
    assert fa[1] == ra[1]  # read again from the file


@needs_batch
def test_blocks_read_ahead_on_the_kernels_threads_give_the_same_records(tmp_path, monkeypatch):
    # blocks of 3 vars: several blocks in flight while earlier ones are filed
    a, b = dtype_corners(tmp_path)
    whole = batch.prefetch(*_folders(a, b), 1 << 15, parse_threshold(1e-3), 2)
    monkeypatch.setattr(batch, "BLOCK", 3)
    small = batch.prefetch(*_folders(a, b), 1 << 15, parse_threshold(1e-3), 2)
    assert {v: dataclasses.asdict(d) for v, d in small.items()} == {v: dataclasses.asdict(d) for v, d in whole.items()}
    assert_identical(*both(a, b, threshold=1e-3))


@needs_batch
def test_a_started_scan_gives_what_scan_pairs_gives_once_and_may_be_dropped(tmp_path):
    from lar_prec.compare.engine.scan import KERNEL

    a, b = dtype_corners(tmp_path)
    fa, fb = _folders(a, b)
    files_a, files_b = fa.files(), fb.files()
    ids = sorted(files_a)
    args = ([files_a[v] for v in ids], [files_b.get(v) for v in ids], batch._DTYPE_ROWS, batch.MAX_FILE, 1 << 15, 1e-3, 2)
    job = KERNEL.scan_start(*args)
    assert KERNEL.scan_finish(job) == KERNEL.scan_pairs(*args)
    with pytest.raises(ValueError, match="finished"):
        KERNEL.scan_finish(job)
    for _ in range(20):  # dropped while its threads read: waited for and freed, no crash
        KERNEL.scan_start(*args)
    with pytest.raises(TypeError):
        KERNEL.scan_start([1], [None], batch._DTYPE_ROWS, batch.MAX_FILE, 1 << 15, None, 1)


def _filed(a: Path, b: Path, fixed, monkeypatch, python: bool):
    """prefetch's records, rows and kept headers, the usual vars filed by the kernel's
    file_records (or, ``python``, every var by the Python filing); how many the Python filed."""
    from lar_prec.dumps.folder import DumpFolder

    seen = []
    one = batch._file_one

    def counted(*args):
        seen.append(args[2])
        return one(*args)

    monkeypatch.setattr(batch, "_file_one", counted)
    if python:
        monkeypatch.setattr(batch, "_file", lambda fa, fb, block, got, fixed, measured, rows=None: [
            counted(fa, fb, v, item, fixed, measured, rows) for v, item in zip(block, got)])
    fa, fb = DumpFolder(a), DumpFolder(b)
    rows = {} if fixed is None else None
    measured = batch.prefetch(fa, fb, 1 << 15, fixed, 2, rows=rows)
    monkeypatch.undo()
    records = {v: list(d.__dict__.items()) for v, d in measured.items()}  # the same keys in the same order
    return records, rows, fa.kept_heads(), fb.kept_heads(), len(seen)


@needs_batch
@pytest.mark.megengine
@pytest.mark.parametrize("case", ["resnet", "quantized", "corners"])
@pytest.mark.parametrize("threshold", [1e-3, None])
def test_the_kernels_filing_is_the_python_filing(lar_dump, tmp_path, monkeypatch, case, threshold):
    """file_records keeps the headers and makes the records (and an auto threshold's rows) of the
    usual vars as the Python filing does, and leaves it the rest (quantized vars, B's own title)."""
    if case == "corners":
        a, b = dtype_corners(tmp_path)
    else:
        a, b = lar_dump(case, "naive"), lar_dump(case, "default")
    fixed = parse_threshold(threshold) if threshold else None
    fast, slow = _filed(a, b, fixed, monkeypatch, False), _filed(a, b, fixed, monkeypatch, True)
    assert fast[:4] == slow[:4]
    assert len(fast[0]) > 5 and slow[4] >= len(fast[0])
    assert fast[4] < slow[4]  # the kernel filed some of them
    if case == "quantized":
        assert fast[4] > 0  # a quantized var's note: the Python filing's
