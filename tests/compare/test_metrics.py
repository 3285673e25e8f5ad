"""The streaming engine against the reference definitions of lar_prec.compare.metrics.

metrics.reference computes every metric of two whole arrays the plain way; compare_folders
must give the same numbers whatever the chunk size, the path (C kernel or numpy), the
worker strategy or the piece size: maxima, worst index and values, ulps and counts bit for
bit; max_abs_err and max_rel_err to float32 rounding (the engine takes the float32
difference, as compare_binary_iodump does); sums (mean, RMSE, cosine) to float rounding.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compare_helpers import GraphDump, computed_float_vars, inject_fault
from lar_prec.compare import metrics
from lar_prec.compare.engine.workers import EngineSettings
from lar_prec.compare.folders import compare_folders
from lar_prec.errors import UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.pairing import pair_folders

EXACT = ("max_err", "worst_index", "worst_a", "worst_b", "max_ulp", "scale", "n_nonfinite", "n_over", "size")
CLOSE = ("max_abs_err", "max_rel_err", "mean_abs_err", "rmse", "cosine")
#: a threshold float32 represents exactly: counts do not depend on how it is rounded
THR = 2.0**-12

SETTINGS = {
    "serial": EngineSettings(),
    "numpy": EngineSettings(kernel=False),
    "forked pieces": EngineSettings(piece_elements=37, parallel_min_bytes=0, small_task_elements=0, strategy="fork"),
    "threaded pieces": EngineSettings(piece_elements=37, parallel_min_bytes=0, small_task_elements=0, strategy="thread"),
}


def assert_matches_reference(d, ref: dict) -> None:
    for f in EXACT:
        if f in ref:
            assert getattr(d, f) == ref[f], (f, getattr(d, f), ref[f])
    for f in CLOSE:
        if f in ref:
            x, y = getattr(d, f), ref[f]
            if y is None:
                assert x is None, (f, x)
            else:
                assert x == pytest.approx(y, rel=1e-6, abs=1e-30), (f, x, y)
    if "max_err" not in ref:
        assert d.max_err is None


def pair_of(tmp, a: np.ndarray, b: np.ndarray):
    ga, gb = GraphDump(tmp / "a"), GraphDump(tmp / "b")
    ga.add(3, a)
    gb.add(3, b)
    return ga.folder, gb.folder


def test_megengine_err_fast_form_is_bit_identical():
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.standard_normal(4000) * s for s in (1e-30, 1e-3, 1.0, 1e3, 1e30)]).astype(np.float32)
    b = (a * (1 + rng.standard_normal(a.size) * 1e-3)).astype(np.float32)
    b[::7] = 0
    a[::11] = 0
    b[::13] = -a[::13]
    n = a.size
    m, d, out = (np.empty(n, np.float32) for _ in range(3))
    signed = np.empty(n, np.float64)
    with np.errstate(all="ignore"):
        fast, rel = metrics.megengine_err_into(a, b, m, d, out, signed=signed, rel=True)
        ref = metrics.megengine_err(a, b)
        assert rel == float(np.nanmax(np.abs(a - b) / np.maximum(np.abs(a), np.abs(b))))
    assert fast.tobytes() == ref.tobytes()
    assert signed.tobytes() == (a - b).astype(np.float64).tobytes()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.lists(st.tuples(st.floats(width=32, allow_subnormal=False), st.floats(width=32, allow_subnormal=False)),
                  min_size=1, max_size=120),
    same_prefix=st.integers(0, 120),
    chunk=st.sampled_from([1, 8, 16, 1 << 15]),
    how=st.sampled_from(sorted(SETTINGS)),
)
def test_engine_matches_reference_on_any_values(tmp_path_factory, data, same_prefix, chunk, how):
    a = np.array([x for x, _ in data], np.float32)
    b = np.array([y for _, y in data], np.float32)
    b[:same_prefix] = a[:same_prefix]  # identical chunks take their own path
    da, db = pair_of(tmp_path_factory.mktemp("m"), a, b)
    d = compare_folders(da, db, threshold=THR, chunk_elements=chunk, jobs=2, settings=SETTINGS[how])[3]
    assert_matches_reference(d, metrics.reference(a, b, THR))


@pytest.mark.parametrize("how", sorted(SETTINGS))
def test_engine_matches_reference_on_float16(tmp_path, how):
    rng = np.random.default_rng(8)
    a = rng.standard_normal(3000).astype(np.float16)
    b = (a.astype(np.float32) * (1 + rng.standard_normal(a.size).astype(np.float32) * 2e-3)).astype(np.float16)
    b[:500] = a[:500]
    b[777] = np.inf
    da, db = pair_of(tmp_path, a, b)
    d = compare_folders(da, db, threshold=THR, chunk_elements=256, jobs=2, settings=SETTINGS[how])[3]
    assert_matches_reference(d, metrics.reference(a, b, THR))


@pytest.mark.megengine
@pytest.mark.parametrize("case", ["resnet", "attention"])
def test_engine_matches_reference_on_real_dumps(lar_dump, tmp_path, case):
    """Every float var of a real naive-vs-default pair, and of the same pair with a fault
    injected into a var in the middle, measured by the engine four ways."""
    naive, default = lar_dump(case, "naive"), lar_dump(case, "default")
    fa = DumpFolder(naive)
    # a computed var: a constant that differs is another weight (judged exactly), not a fault
    mid = [v for v in computed_float_vars(fa) if fa[v].dtype.name == "Float32" and fa[v].size > 1000][3]
    broken = tmp_path / "broken"
    inject_fault(default, broken, mid, 1e-3)
    for other in (default, broken):
        fb = DumpFolder(other)
        refs = {}
        for v in fa.ids:
            if fa[v].dtype.name == "Float32":
                refs[v] = metrics.reference(np.asarray(fa[v].array()), np.asarray(fb[v].array()), THR)
        for how, st_ in SETTINGS.items():
            cmp = compare_folders(naive, other, threshold=THR, chunk_elements=1000, jobs=2, settings=st_)
            for v, ref in refs.items():
                assert_matches_reference(cmp[v], ref)


def test_pairing_by_id_is_its_own_stage(tmp_path):
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    x = np.arange(4, dtype=np.float32)
    for v in (3, 4, 5):
        ga.add(v, x, inputs=(v - 1,) if v > 3 else ())
    for v in (3, 5, 6):
        gb.add(v, x, inputs=(3,) if v > 3 else ())
    p = pair_folders(DumpFolder(ga.folder), DumpFolder(gb.folder))
    assert p.mode == "id"
    assert p.pairs == ((3, 3), (5, 5)) and p.only_a == (4,) and p.only_b == (6,)
    # B's var 6 reads var 3: it is placed right after it
    assert p.order == ((3, 3), (None, 6), (4, None), (5, 5))
    cmp = compare_folders(ga.folder, gb.folder)
    assert cmp.ids == (3, 6, 4, 5)
    assert [cmp[v].status for v in cmp.ids] == ["ok", "missing", "missing", "ok"]
    with pytest.raises(UsageError, match="pairing mode"):
        pair_folders(DumpFolder(ga.folder), DumpFolder(gb.folder), mode="fuzzy")
    with pytest.raises(UsageError, match="pairing mode"):
        compare_folders(ga.folder, gb.folder, pairing="fuzzy")


def test_max_megengine_err_of_whole_tensors():
    """One var's max_err (what local error and the sweep use) from the element-wise definition:
    NaN/Inf in the same place is no difference, on one side only it is inf; integers too big for
    float32 still differ."""
    a = np.array([1.0, 2.0, 0.5, np.nan, np.inf], np.float32)
    b = np.array([1.0, 2.5, 0.5, np.nan, np.inf], np.float32)
    assert metrics.max_megengine_err(a, b) == float(metrics.megengine_err(a[:3], b[:3]).max()) == float(np.float32(0.2))
    b[4] = -np.inf
    assert metrics.max_megengine_err(a, b) == float("inf")
    assert metrics.max_megengine_err(np.array([np.nan], np.float32), np.array([np.nan], np.float32)) == 0.0
    big = np.array([2**24 + 1], np.int32)
    assert metrics.max_megengine_err(big, big - 1) > 0  # equal once cast to float32
    assert metrics.max_megengine_err(np.zeros(0, np.float32), np.zeros(0, np.float32)) == 0.0
