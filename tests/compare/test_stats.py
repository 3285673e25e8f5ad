"""Error statistics per var (issue 40 #1): quantiles from the engine's histogram against exact
quantiles of the same errors, the pass ratio, and the histogram's two implementations (C and
numpy) against each other, on real dumps with a fault injected."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from compare_helpers import computed_float_vars, inject_fault
from lar_prec.compare.engine import hist
from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.metrics import megengine_err
from lar_prec.dumps.folder import DumpFolder

ROOT_DIR = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def faulty(lar_dump, tmp_path_factory):
    """resnet naive against default with one var 1e-4 off (and everything after it): errors from
    rounding (~1e-7) to the fault's."""
    naive = lar_dump("resnet", "naive")
    victim = computed_float_vars(DumpFolder(naive))[4]
    broken = tmp_path_factory.mktemp("stats") / "b"
    inject_fault(lar_dump("resnet", "default"), broken, victim, 1e-4)
    return naive, broken, victim


def exact(values: np.ndarray, p: float) -> float:
    """The ceil(p * n)-th smallest value (the histogram's definition of a quantile)."""
    s = np.sort(values, kind="stable")
    return float(s[max(1, math.ceil(p * s.size)) - 1])


def assert_within(reported: float, truth: float) -> None:
    """Never below the exact quantile, at most 1/16 above it (2**-64 for what is below that)."""
    if truth == 0:
        assert reported == 0
    elif truth < 2.0**-64:
        assert truth <= reported <= 2.0**-64
    else:
        assert truth <= reported <= truth * (1 + hist.PRECISION), (reported, truth)


@pytest.mark.megengine
def test_quantiles_are_the_exact_ones_to_a_sixteenth(faulty):
    naive, broken, victim = faulty
    cmp = compare_folders(naive, broken, stats=True)
    fa, fb = DumpFolder(naive), DumpFolder(broken)
    checked = 0
    for d in cmp:
        if d.dtype != "Float32" or d.err_p50 is None:
            continue
        a, b = fa[d.id].array().ravel(), fb[d.id].array().ravel()
        e = megengine_err(a, b)
        diff = np.abs(np.subtract(a, b, dtype=np.float32))
        with np.errstate(all="ignore"):
            rel = np.where(diff == 0, np.float32(0), diff / np.maximum(np.abs(a), np.abs(b)))
        for name, p in zip(hist.Q_NAMES, (0.5, 0.9, 0.99, 0.999)):
            assert_within(getattr(d, f"err_{name}"), exact(e, p))
            assert_within(getattr(d, f"rel_err_{name}"), exact(rel, p))
            assert_within(getattr(d, f"abs_err_{name}"), exact(diff, p))
        assert d.pass_threshold == d.max_err and d.err_p999 <= d.max_err  # pass ratio 1: the max itself
        checked += 1
    assert checked > 20 and cmp[victim].err_p50 > 1e-6  # noise and fault both seen


@pytest.mark.megengine
def test_the_pass_ratio_passes_a_var_above_its_threshold_in_few_elements(faulty, tmp_path):
    naive, broken, victim = faulty
    base = compare_folders(naive, broken)
    v = base[victim]
    assert v.status == "divergent" and v.within_share < 1.0
    ratio = math.floor(v.within_share * 1000) / 1000  # just at or below its share within
    cmp = compare_folders(naive, broken, pass_ratio=ratio)
    w = cmp[victim]
    assert w.status == "ok" and "passes by the pass ratio" in w.note and w.n_over == v.n_over
    assert w.pass_threshold <= w.threshold * (1 + hist.PRECISION)  # the threshold it would pass at
    assert cmp.threshold.pass_ratio == ratio and any("pass ratio" in n for n in cmp.notes)
    strict = compare_folders(naive, broken, pass_ratio=min(1.0, ratio + 0.01))
    assert strict[victim].status == "divergent"


@pytest.mark.megengine
def test_compare_stats_prints_them_and_says_the_pass_ratio(faulty, tmp_path):
    naive, broken, victim = faulty
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "lar_prec", "compare", str(naive), str(broken), "--stats",
                           "--pass-ratio", "0.5", "--json", str(out)], cwd=ROOT_DIR, capture_output=True, text=True)
    rep = json.loads(out.read_text())
    assert "Error statistics" in proc.stdout and "err p50" in proc.stdout and "within" in proc.stdout
    assert rep["threshold"]["pass_ratio"] == 0.5 and "pass only by the pass ratio 0.5" in rep["verdict"]
    assert proc.returncode == rep["summary"]["exit_code"]
    v = {x["id"]: x for x in rep["vars"]}[victim]
    assert v["rel_err_p99"] is not None and v["within_share"] is not None


@pytest.mark.skipif(KERNEL is None, reason="the C kernel is not built")
def test_the_histogram_is_read_alike_in_c_and_numpy(faulty):
    naive, broken, victim = faulty
    fa, fb = DumpFolder(naive), DumpFolder(broken)
    for vid in (victim, computed_float_vars(fa)[0]):
        a, b = fa[vid].array().ravel(), fb[vid].array().ravel()
        for full in (False, True):
            hc, hn = hist.new(), hist.new()
            assert KERNEL.float32(a, b, True, None, -1.0, hc, full) is not None
            hist.add_chunk(hn, a, b, full)
            assert list(hc) == list(hn)  # the same counts in the same bins
            r = KERNEL.float32(a, b, True, None, -1.0)
            maxima = (max(r[2], 0.0), r[4], r[0])
            for ratio in (1.0, 0.999, 0.9, 0.5, 1e-9):
                assert KERNEL.hist_stats(hc, a.size, ratio, full, *maxima) == hist.stats_np(hc, a.size, ratio, full,
                                                                                           *maxima)
            twice = hist.new()
            hist.add_np(twice, hc)
            KERNEL.hist_add(twice, hn)
            assert list(twice[: 4 * hist.NB]) == [2 * x for x in hc[: 4 * hist.NB]]


@pytest.mark.skipif(KERNEL is None, reason="the C kernel is not built")
@pytest.mark.megengine
def test_the_second_pass_counts_what_the_reference_counts(faulty, lar_dump):
    """An auto threshold's count, read again by the kernel (count_pairs) or taken from the errors
    the batch reader kept inside the window (count_from_band), is the reference's n_over."""
    from lar_prec.compare.threshold import count_from_band, to_float32
    from lar_prec.compare.engine.io import Extent

    naive, broken, victim = faulty
    cmp = compare_folders(naive, broken)  # auto: every resnet var is small, the batch reader keeps windows
    fa, fb = DumpFolder(naive), DumpFolder(broken)
    pairs, want = [], []
    for d in cmp:
        if d.dtype != "Float32" or d.max_err is None or not d.max_err > 0:
            continue
        a, b = fa[d.id].array(), fb[d.id].array()
        for t in (d.threshold, d.max_err / 3, 1e-7):
            ea, eb = Extent.of(fa[d.id]), Extent.of(fb[d.id])
            pairs.append((ea.file, ea.data_offset, eb.file, -1, d.size, False, t))
            want.append(int(np.count_nonzero(megengine_err(a, b) > to_float32(t))))
            kept = count_from_band(d.band, d.dtype, d.scale, t)
            assert kept is None or kept == want[-1], (d.id, t)
    assert KERNEL.count_pairs(pairs, 1000, 2) == want and sum(want) > 0
    assert cmp[victim].n_over == want[[p[0] for p in pairs].index(str(fa[victim].file))]
    # float16 values, and a file that cannot be read
    h16a, h16b = DumpFolder(lar_dump("fp16", "naive")), DumpFolder(lar_dump("fp16", "default"))
    v = next(x for x in h16a.ids if h16a[x].dtype.name == "Float16" and h16a[x].size > 1)
    a, b = h16a[v].array().astype(np.float32), h16b[v].array().astype(np.float32)
    got = KERNEL.count_pairs([(h16a[v].file, -1, h16b[v].file, -1, a.size, True, 0.0),
                              (h16a[v].file, -1, "/nonexistent", -1, a.size, True, 0.0)], 7, 1)
    assert got == [int(np.count_nonzero(megengine_err(a, b) > 0)), None]
