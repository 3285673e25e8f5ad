"""Tests of lar_prec.compare: per-var metrics, statuses, thresholds, streaming.

Metric checks compare the streamed, chunked results against plain numpy on the same
arrays. Real dumps of the built cases, with MegEngine's own ``compare_binary_iodump`` as the
oracle: test_compare_real.py.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compare_helpers import GraphDump
from lar_prec.compare.engine.workers import EngineSettings, Strategy
from lar_prec.compare.threshold import Threshold, choose_threshold, parse_threshold
from lar_prec.compare.arrays import compare_arrays
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.engine.workers import Failure, can_fork, resolve_strategy, run_shared
from lar_prec.errors import DumpFolderError, DumpFormatError, UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import dump_file_name


def mge_err(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """compare_binary_iodump's element error, computed the way it does (float32)."""
    v0 = np.ascontiguousarray(a, dtype=np.float32)
    v1 = np.ascontiguousarray(b, dtype=np.float32)
    with np.errstate(all="ignore"):
        vdiv = np.max([np.abs(v0), np.abs(v1), np.ones_like(v0)], axis=0)
        return np.abs(v0 - v1) / vdiv


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    """Largest ulp distance of float32 values, the slow obvious way (-0 equals +0)."""
    ia = a.astype(np.float32).view(np.int32).astype(np.int64)
    ib = b.astype(np.float32).view(np.int32).astype(np.int64)
    oa = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ob = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return int(np.abs(oa - ob).max())


def pair(tmp_path: Path, a: np.ndarray, b: np.ndarray, **kw) -> tuple:
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    ga.add(3, a, **kw)
    gb.add(3, b, **kw)
    return ga.folder, gb.folder


# ============================================================================ metrics


def test_metrics_match_numpy_reference(tmp_path):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((4, 5, 33)) * 3).astype(np.float32)
    b = (a * (1 + rng.standard_normal(a.shape) * 1e-5)).astype(np.float32)
    da, db = pair(tmp_path, a, b)
    d = compare_folders(da, db, chunk_elements=97)[3]
    err = mge_err(a, b)
    x, y = a.astype(np.float64), b.astype(np.float64)
    diff = np.abs(x - y)
    assert d.max_err == float(err.max())
    assert d.worst_index == tuple(int(i) for i in np.unravel_index(err.argmax(), a.shape))
    assert d.worst_a == float(a[d.worst_index]) and d.worst_b == float(b[d.worst_index])
    assert d.max_abs_err == pytest.approx(float(diff.max()), rel=1e-6)
    assert d.mean_abs_err == pytest.approx(float(diff.mean()), rel=1e-5)
    assert d.rmse == pytest.approx(float(np.sqrt((diff**2).mean())), rel=1e-5)
    m = np.maximum(np.abs(x), np.abs(y))
    assert d.max_rel_err == pytest.approx(float((diff / m).max()), rel=1e-5)
    cos = float(np.dot(x.ravel(), y.ravel()) / np.linalg.norm(x) / np.linalg.norm(y))
    assert d.cosine == pytest.approx(cos, abs=1e-12)
    assert d.max_ulp == ulps(a, b)
    assert d.scale == float(m.max())
    assert d.size == a.size and d.shape == a.shape


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 300),
    chunk=st.integers(1, 64),
    noise=st.sampled_from([0.0, 1e-7, 1e-3, 1.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_chunking_does_not_change_results(tmp_path_factory, n, chunk, noise, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3])).astype(np.float32)
    b = (a + rng.standard_normal(n) * noise * np.abs(a)).astype(np.float32)
    tmp = tmp_path_factory.mktemp("chunk")
    da, db = pair(tmp, a, b)
    one = compare_folders(da, db, chunk_elements=1 << 16)[3]
    many = compare_folders(da, db, chunk_elements=chunk)[3]
    assert one.max_err == many.max_err == float(mge_err(a, b).max())
    assert one.worst_index == many.worst_index
    assert one.max_ulp == many.max_ulp
    assert one.max_abs_err == many.max_abs_err
    assert one.status == many.status
    for f in ("mean_abs_err", "rmse", "cosine"):
        assert getattr(one, f) == pytest.approx(getattr(many, f), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize(
    "a, b",
    [
        ([-1e-45, 0.0, -0.0, 1.0], [1e-45, -0.0, 0.0, 1.0]),  # through zero, signed zeros
        ([1.0, -1.0, 3.0], [1.0, 1.0, 3.0]),  # a sign flip of a large value
        ([-2.0, -2.5], [-2.0000002, -2.5]),  # same sign, negative
        ([0.0, 0.0], [-0.0, 0.0]),  # only signed zeros: equal values
        ([-3e38, 5.0], [3e38, 5.0]),  # the largest distance there is
    ],
)
def test_ulp_distance(tmp_path, a, b):
    a = np.array(a, np.float32)
    b = np.array(b, np.float32)
    for chunk in (1, 3, 1 << 10):
        d = compare_folders(*pair(tmp_path / str(chunk), a, b), chunk_elements=chunk)[3]
        assert d.max_ulp == ulps(a, b)


def test_identical_tensors_are_ok_with_zero_error(tmp_path):
    a = np.linspace(-2, 2, 1000, dtype=np.float32).reshape(10, 100)
    d = compare_folders(*pair(tmp_path, a, a.copy()), chunk_elements=128)[3]
    assert d.status == "ok"
    assert (d.max_err, d.max_abs_err, d.max_ulp, d.n_over) == (0.0, 0.0, 0, 0)
    assert d.cosine == pytest.approx(1.0, abs=1e-15)
    assert d.scale == 2.0


def test_nan_in_the_same_place_is_equal(tmp_path):
    a = np.arange(12, dtype=np.float32)
    a[[2, 7]] = np.nan
    a[5] = np.inf
    b = a.copy()
    b[0] += 1e-6  # a tiny real difference in the finite part
    d = compare_folders(*pair(tmp_path, a, b))[3]
    assert d.status == "ok"
    assert d.n_nonfinite == 0
    assert d.max_err == float(np.nanmax(np.where(np.isfinite(a), mge_err(a, b), np.nan)))


@pytest.mark.parametrize(
    "va, vb",
    [(np.nan, 1.0), (1.0, np.inf), (np.inf, -np.inf), (np.nan, np.inf), (2.0, np.nan)],
)
def test_nonfinite_on_one_side_is_nonfinite(tmp_path, va, vb):
    a = np.ones((3, 4), np.float32)
    b = a.copy()
    a[1, 2] = va
    b[1, 2] = vb
    d = compare_folders(*pair(tmp_path, a, b))[3]
    assert d.status == "nonfinite"
    assert d.n_nonfinite == 1
    assert "(1, 2)" in d.note
    assert d.max_err == 0.0  # the finite part agrees


def test_float32_overflow_of_the_difference_is_finite(tmp_path):
    a = np.array([3e38, 1.0], np.float32)
    b = np.array([-3e38, 1.0], np.float32)
    d = compare_folders(*pair(tmp_path, a, b))[3]
    assert d.status == "divergent"
    assert d.max_err == pytest.approx(2.0)
    assert math.isfinite(d.max_abs_err)


def test_float16_metrics_and_ulps(tmp_path):
    a = np.array([1.0, 2.0, -0.5, 1000.0], np.float16)
    b = np.array([1.0, np.nextafter(np.float16(2.0), np.float16(3.0)), -0.5, 1000.0], np.float16)
    d = compare_folders(*pair(tmp_path, a, b))[3]
    assert d.dtype == "Float16"
    assert d.max_ulp == 1
    assert d.max_err == float(mge_err(a, b).max())
    assert d.status == "ok"  # one ulp of float16 is below its noise floor


def test_bfloat16_ulps(tmp_path):
    a = np.array([1.0, 2.0, 3.0], np.float32)
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    bits = ((a.view(np.uint32) >> 16)).astype(np.uint16)
    ga.add(3, bits, dtype="BFloat16")
    gb.add(3, bits + np.uint16(2), dtype="BFloat16")
    d = compare_folders(ga.folder, gb.folder)[3]
    assert d.dtype == "BFloat16"
    assert d.max_ulp == 2


def test_integers_compare_exactly_even_beyond_float32(tmp_path):
    a = np.array([1 << 25, 5, -7], np.int32)
    b = a.copy()
    b[0] += 1  # float32 cannot see this difference
    d = compare_folders(*pair(tmp_path, a, b), threshold=1e-3)[3]
    assert d.status == "divergent"
    assert d.n_diff == 1 and d.n_over == 1
    assert d.max_ulp is None
    assert d.max_abs_err == 1.0
    same = compare_folders(*pair(tmp_path / "s", a, a.copy()))[3]
    assert same.status == "ok" and same.n_diff == 0


def test_bool_compares_by_xor(tmp_path):
    a = np.array([True, False, True, True])
    b = np.array([True, True, True, False])
    d = compare_folders(*pair(tmp_path, a, b))[3]
    assert d.dtype == "Bool"
    assert d.status == "divergent"
    assert d.n_diff == int(np.count_nonzero(a ^ b))


def test_quantized_is_raw_exact_and_scale_unknown(tmp_path):
    a = np.array([[1, -3, 127]], np.int8)
    b = np.array([[1, -1, 127]], np.int8)
    d = compare_folders(*pair(tmp_path, a, b, dtype="QuantizedS8"))[3]
    assert d.scale_unknown
    assert "scale unknown" in d.note
    assert d.status == "divergent" and d.n_diff == 1 and d.max_abs_err == 2
    # one step: a kernel's rounding, ok in auto mode with both notes; any fixed threshold keeps it
    one = np.array([[1, -2, 127]], np.int8)
    d1 = compare_folders(*pair(tmp_path / "one", a, one, dtype="QuantizedS8"))[3]
    assert d1.status == "ok" and "scale unknown" in d1.note and "one quantization step" in d1.note
    assert compare_folders(*pair(tmp_path / "one0", a, one, dtype="QuantizedS8"), threshold=0)[3].status == "divergent"
    ok = compare_folders(*pair(tmp_path / "s", a, a.copy(), dtype="QuantizedS8"))[3]
    assert ok.status == "ok" and ok.scale_unknown


def test_lowbit_compares_raw_bytes(tmp_path):
    raw_a = np.array([0x12, 0x34], np.uint8)
    raw_b = np.array([0x12, 0x35], np.uint8)
    d = compare_folders(*pair(tmp_path, raw_a, raw_b, dtype="IntB4", shape=(4,)))[3]
    assert d.status == "divergent"
    assert d.max_err is None
    assert "not decoded" in d.note


def test_scalar_var(tmp_path):
    a = np.array(1.5, np.float32)
    d = compare_folders(*pair(tmp_path, a, np.array(1.5 + 1e-3, np.float32)))[3]
    assert d.shape == () and d.worst_index == ()
    assert d.status == "divergent"


# ============================================================================ structure


def test_shape_dtype_missing_and_one_bad_var_does_not_stop(tmp_path):
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    x = np.ones((2, 3), np.float32)
    ga.add(3, x)
    gb.add(3, x)
    ga.add(5, x, inputs=[3])
    gb.add(5, np.ones((3, 2), np.float32), inputs=[3])
    ga.add(7, x, inputs=[5])
    gb.add(7, x.astype(np.float16), inputs=[5])
    ga.add(9, x, inputs=[7])  # only in A
    ga.add(10, x, inputs=[9])
    gb.add(10, x * 2, inputs=[9])
    gb.add(12, x, inputs=[10])  # only in B
    cmp = compare_folders(ga.folder, gb.folder)
    st = {d.id: d.status for d in cmp}
    assert st == {3: "ok", 5: "shape_mismatch", 7: "dtype_mismatch", 9: "missing", 10: "divergent", 12: "missing"}
    assert cmp[5].shape == (2, 3) and cmp[5].shape_b == (3, 2)
    assert cmp[7].dtype_b == "Float16" and cmp[7].max_err == 0.0
    assert cmp[9].only_in == "a" and cmp[12].only_in == "b"
    assert list(cmp.ids) == [3, 5, 7, 9, 10, 12]
    assert cmp.diverged
    assert cmp.counts()["missing"] == 2


def test_execution_order_is_topological_not_by_name(tmp_path):
    g = {k: GraphDump(tmp_path / k) for k in "ab"}
    for gd in g.values():
        x = np.ones(4, np.float32)
        gd.add(20, x)
        gd.add(4, x, inputs=[20])  # a consumer with a smaller id than its input
        gd.add(9, x, inputs=[4])
    assert list(compare_folders(g["a"].folder, g["b"].folder).ids) == [20, 4, 9]


def test_folder_errors(tmp_path):
    ga = GraphDump(tmp_path / "a")
    ga.add(3, np.ones(3, np.float32))
    with pytest.raises(DumpFolderError, match="does not exist"):
        compare_folders(ga.folder, tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DumpFolderError, match="no binary dump files in .*empty"):
        compare_folders(ga.folder, tmp_path / "empty")
    gc = GraphDump(tmp_path / "c")
    gc.add(4, np.ones(3, np.float32))
    with pytest.raises(DumpFolderError, match="no var in common"):
        compare_folders(ga.folder, gc.folder)
    gd = GraphDump(tmp_path / "d")
    gd.add(3, np.ones(3, np.float32))
    bad = gd.folder / dump_file_name(3)
    bad.write_bytes(bad.read_bytes()[:-2])  # truncated data
    with pytest.raises(DumpFormatError, match="000003"):
        compare_folders(ga.folder, gd.folder)


def test_bad_arguments():
    with pytest.raises(UsageError, match="auto"):
        parse_threshold("abc")
    with pytest.raises(UsageError):
        parse_threshold(-1)
    with pytest.raises(UsageError):
        compare_folders(".", ".", chunk_elements=0)


@pytest.mark.parametrize("strategy", ["fork", "thread"])
def test_jobs_give_the_same_result(tmp_path, strategy):
    # workers even for small folders; the 500-value vars go to workers, the rest stay
    st = EngineSettings(parallel_min_bytes=0, small_task_elements=400, strategy=strategy)
    rng = np.random.default_rng(5)
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    prev = ()
    for v in range(3, 40):
        a = rng.standard_normal(500 if v % 2 else 300).astype(np.float32)
        ga.add(v, a, inputs=prev)
        gb.add(v, (a * (1 + 1e-3 * (v % 3 == 0))).astype(np.float32), inputs=prev)
        prev = (v,)
    one = compare_folders(ga.folder, gb.folder, jobs=1, chunk_elements=64)
    two = compare_folders(ga.folder, gb.folder, jobs=3, chunk_elements=64, settings=st)
    assert one.diffs == two.diffs


def test_big_vars_split_across_workers_give_the_same_result(tmp_path):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((50, 101)).astype(np.float32)
    b = (a * (1 + rng.standard_normal(a.shape) * 1e-6)).astype(np.float32)
    b[7, 3] = np.nan
    a[40, 1] = b[40, 1] = np.inf
    b[33, 50] = a[33, 50] * np.float32(1.5)
    da, db = pair(tmp_path, a, b)
    one = compare_folders(da, db, jobs=1, chunk_elements=64)
    st = EngineSettings(piece_elements=300, parallel_min_bytes=0, small_task_elements=0)  # 17 pieces
    many = compare_folders(da, db, jobs=3, chunk_elements=64, settings=st)
    x, y = one[3], many[3]
    assert (x.max_err, x.worst_index, x.max_abs_err, x.max_ulp, x.n_nonfinite, x.status, x.note) == (
        y.max_err, y.worst_index, y.max_abs_err, y.max_ulp, y.n_nonfinite, y.status, y.note)
    assert x.worst_index == (33, 50) and x.status == "nonfinite"
    for f in ("mean_abs_err", "rmse", "cosine", "max_rel_err", "scale"):
        assert getattr(x, f) == pytest.approx(getattr(y, f), rel=1e-9)


def test_strategy_is_the_same_with_other_threads_running(tmp_path):
    """A progress bar's refresh thread (a terminal) must not change how the work runs: the
    strategy depends on the settings, jobs and data size only, and forked workers started
    while another thread runs give the same results."""
    import threading

    st = EngineSettings(parallel_min_bytes=0, small_task_elements=0)
    piped = resolve_strategy(st, 2, 1 << 20)
    rng = np.random.default_rng(2)
    a = rng.standard_normal(5000).astype(np.float32)
    da, db = pair(tmp_path, a, (a * np.float32(1.001)).astype(np.float32))
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    calls = []
    try:
        assert resolve_strategy(st, 2, 1 << 20) == piped
        par = compare_folders(da, db, jobs=2, chunk_elements=100, settings=st,
                              on_progress=lambda done, total: calls.append(threading.current_thread()))
    finally:
        stop.set()
        t.join()
    assert piped == (2, Strategy.FORK if can_fork() else Strategy.THREAD)
    assert calls and set(calls) == {threading.main_thread()}  # progress from the caller's thread
    assert par.diffs == compare_folders(da, db, jobs=1, chunk_elements=100).diffs


def test_strategy_choice_and_settings_checks():
    st = EngineSettings()
    assert resolve_strategy(st, 1, 1 << 40) == (1, Strategy.SERIAL)
    assert resolve_strategy(st, 4, st.parallel_min_bytes - 1) == (1, Strategy.SERIAL)
    assert resolve_strategy(EngineSettings(strategy="thread"), 4, 1 << 40) == (4, Strategy.THREAD)
    assert resolve_strategy(EngineSettings(strategy="serial"), 4, 1 << 40) == (1, Strategy.SERIAL)
    with pytest.raises(UsageError, match="strategy"):
        EngineSettings(strategy="gpu")
    with pytest.raises(UsageError, match="chunk_elements"):
        EngineSettings(chunk_elements=0)
    with pytest.raises(UsageError, match="jobs"):
        resolve_strategy(st, 0, 1)


def _square_or_fail(i: int, fail: int) -> int:
    if i == fail:
        raise DumpFormatError("00000b", 40, "16 data bytes", "end of file")
    return i * i


def test_shared_task_list_keeps_order_and_raises_worker_errors():
    seen = []
    assert run_shared(_square_or_fail, [(i, -1) for i in range(200)], 2, seen.append) == [i * i for i in range(200)]
    assert sorted(seen) == list(range(200))
    for fail in (0, 100, 199):  # taken by a worker (front), either, or this process (back)
        with pytest.raises(DumpFormatError, match="00000b at byte 40"):
            run_shared(_square_or_fail, [(i, fail) for i in range(200)], 2)


def test_worker_errors_come_back_as_lar_prec_errors(tmp_path):
    err = DumpFormatError(tmp_path / "00000b", 40, "16 data bytes", "end of file")
    with pytest.raises(DumpFormatError, match="00000b at byte 40: expected 16 data bytes") as info:
        Failure(err).reraise()
    assert info.value.path == tmp_path / "00000b"
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        Failure(ZeroDivisionError("x")).reraise()


def test_progress_hook_reaches_total(tmp_path):
    seen = []
    da, db = pair(tmp_path, np.ones(100, np.float32), np.ones(100, np.float32))
    compare_folders(da, db, on_progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] > 0


def test_compare_arrays_in_memory():
    a = np.linspace(0, 1, 50, dtype=np.float32)
    d = compare_arrays(a, a * np.float32(1.01), threshold=1e-3)
    assert d.status == "divergent" and d.n_over == int(np.count_nonzero(mge_err(a, a * np.float32(1.01)) > np.float32(1e-3)))
    assert compare_arrays(a, a).status == "ok"


# ============================================================================ thresholds


def test_fixed_threshold_counts_and_boundary(tmp_path):
    a = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    b = a * np.float32(1 + 2e-3)
    err = mge_err(a, b)
    da, db = pair(tmp_path, a, b)
    d = compare_folders(da, db, threshold=float(err.max()))[3]
    assert d.status == "ok"  # `err > max_err`, as compare_binary_iodump
    d = compare_folders(da, db, threshold=float(np.nextafter(err.max(), np.float32(0))))[3]
    assert d.status == "divergent" and d.n_over == int(np.count_nonzero(err == err.max()))


def test_bitwise_threshold_zero(tmp_path):
    a = np.ones(10, np.float32)
    b = a.copy()
    b[4] = np.nextafter(np.float32(1), np.float32(2))
    d = compare_folders(*pair(tmp_path, a, b), threshold=0)[3]
    assert d.status == "divergent" and d.n_over == 1 and d.n_diff == 1 and d.max_ulp == 1
    assert compare_folders(*pair(tmp_path / "s", a, a.copy()), threshold=Threshold.fixed(0.0))[3].status == "ok"


def test_each_threshold_judges_and_counts_the_same_measurements(tmp_path):
    a = np.linspace(1, 2, 200, dtype=np.float32)
    b = a.copy()
    b[::7] *= np.float32(1 + 1e-4)
    dirs = pair(tmp_path, a, b)
    cmp = compare_folders(*dirs)
    assert cmp[3].status == "divergent" and cmp.threshold.mode == "auto"
    assert cmp[3].n_over == int(np.count_nonzero(mge_err(a, b) > np.float32(cmp[3].threshold)))
    loose = compare_folders(*dirs, threshold=1e-3)
    assert loose[3].status == "ok" and loose[3].n_over == 0 and loose.threshold.mode == "fixed"
    tight = compare_folders(*dirs, threshold="1e-6")
    assert tight[3].n_over == int(np.count_nonzero(mge_err(a, b) > np.float32(1e-6)))
    assert loose[3].max_err == tight[3].max_err == cmp[3].max_err


def test_auto_threshold_scales_with_magnitude(tmp_path):
    # a var whose values are all ~0.01: a 1e-4 relative change is 1e-6 absolute, below the
    # float32 band, and still found because the threshold scales with the var's magnitude
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(1000) * 0.01).astype(np.float32)
    d = compare_folders(*pair(tmp_path, a, (a * np.float32(1 + 1e-4)).astype(np.float32)))[3]
    assert d.max_err < 5e-6
    assert d.status == "divergent"
    assert d.threshold == pytest.approx(choose_threshold([d]).for_dtype("Float32") * d.scale)


def test_auto_threshold_band_and_reason(tmp_path):
    a = np.ones(10, np.float32)
    cmp = compare_folders(*pair(tmp_path, a, a))
    thr = cmp.threshold
    assert thr.mode == "auto" and thr.metric == "megengine_rel" and thr.scaled
    assert 2e-6 < thr.value < 1e-5
    assert "Float32" in thr.reason and "band" in thr.reason
    assert thr.for_dtype("Int32") == 0.0
    f16 = thr.for_dtype("Float16")
    assert 2**-10 < f16 < 1e-2


# ============================================================================ reading


def test_long_vars_are_read_window_by_window_and_without_mmap(tmp_path, monkeypatch):
    """A var longer than a chunk is memory-mapped a window at a time; where mapping fails
    (file systems without mmap) the same windows are read instead, with the same results."""
    import mmap

    rng = np.random.default_rng(5)
    a = rng.standard_normal(10_007).astype(np.float32)
    b = (a * (1 + 1e-4 * rng.standard_normal(a.size))).astype(np.float32)
    b[9_999] = 7.0
    da, db = pair(tmp_path, a, b)
    st = EngineSettings(window_bytes=4096)  # several windows, and chunks across them
    mapped = compare_folders(da, db, chunk_elements=300, threshold=1e-3, settings=st)[3]
    assert mapped.worst_index == (9_999,) and mapped.max_err == float(mge_err(a, b).max())

    def no_mmap(*_a, **_k):
        raise OSError(19, "No such device")

    monkeypatch.setattr(mmap, "mmap", no_mmap)  # the file system refuses to map
    read = compare_folders(da, db, chunk_elements=300, threshold=1e-3, settings=st)[3]
    assert read == mapped



def test_planning_leaves_the_dump_records_alone(tmp_path):
    """compare keeps Extents of the files, not the dumps: iodump's frozen BinaryDump records
    are never written to (they used to get A's title to share memory)."""
    from lar_prec.compare.engine.plan import plan_folders
    from lar_prec.compare.pairing import pair_folders

    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    for v in range(3, 30):
        x = np.full(7, v, np.float32)
        ga.add(v, x, inputs=(v - 1,) if v > 3 else ())
        gb.add(v, x, inputs=(v - 1,) if v > 3 else ())
    fa, fb = DumpFolder(ga.folder), DumpFolder(gb.folder)
    held = {v: (fa[v], fb[v]) for v in fa.ids}
    before = {v: (id(a.title), id(b.title), a.title, b.title) for v, (a, b) in held.items()}
    plans, kept = plan_folders(fa, fb, pair_folders(fa, fb), keep=True)
    assert {v: (id(a.title), id(b.title), a.title, b.title) for v, (a, b) in held.items()} == before
    assert all(j.da is not None and j.da.file == held[j.base["id"]][0].file for j in plans)
    assert set(kept) == set(fa.ids)  # float vars: their extents kept for an auto recount
