"""The one-pass C kernel (lar_prec/compare/engine/_kernel.c) against compare.py's numpy path.

Both paths must give the same comparison: maxima, worst index and values, ulps and counts
bit for bit, and sums (mean abs error, RMSE, cosine) to float rounding: both sum in float64
(lar_prec.compare.metrics.sums), in a different order. The numpy path is what a machine without a C
compiler runs; test_metrics.py checks both against the reference definitions and
test_compare.py against MegEngine's compare_binary_iodump.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compare_helpers import GraphDump, computed_float_vars, inject_fault
from lar_prec.compare.engine.workers import EngineSettings
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.engine.hist import STAT_FIELDS
from lar_prec.compare.engine.scan import KERNEL
from lar_prec.dumps.folder import DumpFolder

ROOT = Path(__file__).resolve().parents[2]

EXACT = ("status", "max_err", "worst_index", "worst_a", "worst_b", "max_abs_err", "max_rel_err", "max_ulp",
         "scale", "n_over", "n_diff", "n_nonfinite", "note") + STAT_FIELDS
CLOSE = ("mean_abs_err", "rmse", "cosine")

needs_kernel = pytest.mark.skipif(KERNEL is None, reason="lar_prec.compare.engine._kernel not built (or LAR_PREC_NO_KERNEL=1)")


def both_paths(dir_a: Path, dir_b: Path, **kw) -> tuple:
    """compare_folders through the kernel, then through the numpy path."""
    with_kernel = compare_folders(dir_a, dir_b, **kw)
    with_numpy = compare_folders(dir_a, dir_b, settings=EngineSettings(kernel=False), **kw)
    return with_kernel, with_numpy


def assert_same(ck, cn) -> None:
    assert ck.ids == cn.ids
    assert ck.threshold == cn.threshold
    for k, n in zip(ck, cn):
        for f in EXACT:
            assert getattr(k, f) == getattr(n, f), (k.id, f, getattr(k, f), getattr(n, f))
        for f in CLOSE:
            x, y = getattr(k, f), getattr(n, f)
            if x is None or y is None:
                assert x is None and y is None, (k.id, f, x, y)
            else:
                assert x == pytest.approx(y, rel=1e-5, abs=1e-12), (k.id, f, x, y)


def test_kernel_is_built_where_make_installs():
    """`make` builds the kernel (gcc is on the machines); without it compare is ~3x slower and
    bench/RESULTS.md would say so, so a silent fallback here is a failure."""
    if os.environ.get("LAR_PREC_NO_KERNEL", "") not in ("", "0"):
        pytest.skip("LAR_PREC_NO_KERNEL is set")
    assert KERNEL is not None, "lar_prec.compare.engine._kernel is not importable: was the package installed with `make venv`?"


@needs_kernel
@pytest.mark.megengine
@pytest.mark.parametrize("case", ["cnn", "resnet", "attention", "mlp", "fp16", "int_ops", "quantized"])
def test_real_dumps_same_on_both_paths(lar_dump, case):
    naive, default = lar_dump(case, "naive"), lar_dump(case, "default")
    for thr in ("auto", 1e-6, 0.0):
        ck, cn = both_paths(naive, default, threshold=thr, chunk_elements=1000)
        assert_same(ck, cn)


@needs_kernel
@pytest.mark.megengine
def test_injected_fault_same_on_both_paths(lar_dump, tmp_path):
    """A real resnet dump with one var broken (and its consumers): same roots' numbers."""
    naive = lar_dump("resnet", "naive")
    victim = computed_float_vars(DumpFolder(naive))[5]
    broken = tmp_path / "b"
    inject_fault(lar_dump("resnet", "default"), broken, victim, 1e-3)
    ck, cn = both_paths(naive, broken, threshold="auto", stats=True, pass_ratio=0.99)
    assert_same(ck, cn)
    assert ck[victim].status == "divergent" and ck[victim].rel_err_p50 is not None


@needs_kernel
@pytest.mark.megengine
def test_cli_json_same_on_both_paths(lar_dump, tmp_path):
    """The whole command in two processes, one with LAR_PREC_NO_KERNEL=1: same report."""
    naive, default = lar_dump("attention", "naive"), lar_dump("attention", "default")
    reports = []
    for off in ("0", "1"):
        out = tmp_path / f"r{off}.json"
        env = {**os.environ, "LAR_PREC_NO_KERNEL": off}
        p = subprocess.run([sys.executable, "-m", "lar_prec", "compare", str(naive), str(default), "--json", str(out)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode in (0, 1), p.stderr
        reports.append(json.loads(out.read_text()))
    a, b = reports
    assert a.keys() == b.keys()
    for key in a:
        if key != "vars":
            assert a[key] == b[key], key
    for va, vb in zip(a["vars"], b["vars"]):
        for k in va:
            if isinstance(va[k], float) and k in CLOSE:
                assert va[k] == pytest.approx(vb[k], rel=1e-5), (va["id"], k)
            else:
                assert va[k] == vb[k], (va["id"], k)


# ---------------------------------------------------------------------------- format corners


def corner_pairs() -> List[tuple]:
    """Value patterns where one-pass code could go wrong (lengths around the 8-wide vectors,
    ties, signs, zeros, NaN/Inf, float32 overflow, denormals, |x| around 1)."""
    rng = np.random.default_rng(7)
    out = []
    for n in (1, 2, 7, 8, 9, 15, 16, 17, 63, 1025, 4099):
        a = rng.standard_normal(n).astype(np.float32)
        out.append((f"noise{n}", a, (a * (1 + 1e-6 * rng.standard_normal(n))).astype(np.float32)))
    a = np.ones(40, np.float32)
    b = a.copy()
    b[[5, 17, 33]] = 2.0  # equal maxima: the first index wins
    out.append(("ties", a, b))
    a = np.array([0.0, -0.0, 0.0, 1e-45, -1e-45, 0.5, -0.5, 1.0, -1.0] * 3, np.float32)
    out.append(("zeros_signs", a, -a))
    out.append(("zero_vs_negzero", np.zeros(11, np.float32), -np.zeros(11, np.float32)))
    a = rng.uniform(0.5, 2.0, 33).astype(np.float32)  # |x| on both sides of 1: d/m and d
    out.append(("around_one", a, (a + np.float32(1e-3)).astype(np.float32)))
    a = rng.standard_normal(50).astype(np.float32)
    b = a.copy()
    b[[3, 20]] = np.nan
    a[[20, 41]] = np.inf
    out.append(("nonfinite", a, b))
    a = np.full(19, 3e38, np.float32)
    b = -a  # a - b overflows float32
    out.append(("overflow", a, b))
    a = np.full(24, 2e19, np.float32)  # squares overflow float32
    out.append(("big", a, (a * np.float32(1.0000001)).astype(np.float32)))
    a = (rng.standard_normal(30) * 1e-40).astype(np.float32)  # denormals
    out.append(("denormal", a, np.nextafter(a, np.float32(1)).astype(np.float32)))
    a = rng.standard_normal(64).astype(np.float32)
    out.append(("identical", a, a.copy()))
    return out


@needs_kernel
@pytest.mark.parametrize("name,a,b", corner_pairs(), ids=[c[0] for c in corner_pairs()])
@pytest.mark.parametrize("chunk", [5, 8, 1 << 15])
def test_corner_values_same_on_both_paths(tmp_path, name, a, b, chunk):
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    ga.add(3, a)
    gb.add(3, b)
    for thr in (0.0, 1e-3, float(np.float32(0.7))):
        ck, cn = both_paths(ga.folder, gb.folder, threshold=thr, chunk_elements=chunk, stats=thr == 0.0)
        assert_same(ck, cn)


@needs_kernel
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # no subnormals here: a test that imported megengine in this process leaves flush-to-zero
    # on, which hypothesis refuses; "denormal" in corner_pairs covers them
    data=st.lists(st.tuples(st.floats(width=32, allow_subnormal=False), st.floats(width=32, allow_subnormal=False)),
                  min_size=1, max_size=40),
    chunk=st.sampled_from([3, 8, 16, 1 << 15]),
)
def test_random_values_same_on_both_paths(tmp_path_factory, data, chunk):
    a = np.array([x for x, _ in data], np.float32)
    b = np.array([y for _, y in data], np.float32)
    tmp = tmp_path_factory.mktemp("k")
    ga, gb = GraphDump(tmp / "a"), GraphDump(tmp / "b")
    ga.add(3, a)
    gb.add(3, b)
    ck, cn = both_paths(ga.folder, gb.folder, threshold=0.0, chunk_elements=chunk, stats=True)
    assert_same(ck, cn)


@needs_kernel
def test_kernel_refuses_bad_buffers():
    with pytest.raises(ValueError, match="expected equal"):
        KERNEL.float32(b"\0" * 8, b"\0" * 4, True, None, -1.0)
    with pytest.raises(ValueError, match="expected equal"):
        KERNEL.float32(b"", b"", True, None, -1.0)
    assert KERNEL.same(b"abc", b"abc") and not KERNEL.same(b"abc", b"abd") and not KERNEL.same(b"ab", b"abc")


@needs_kernel
def test_kernel_max_err_is_megengines_float32_error():
    """max_err straight from the kernel equals compare_binary_iodump's float32 arithmetic."""
    rng = np.random.default_rng(11)
    for scale in (1e-3, 1.0, 1e3):
        a = (rng.standard_normal(777) * scale).astype(np.float32)
        b = (a + rng.standard_normal(777).astype(np.float32) * np.float32(scale * 1e-4)).astype(np.float32)
        with np.errstate(all="ignore"):
            err = np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), np.float32(1))
        r = KERNEL.float32(a, b, True, None, -1.0)
        assert r[0] == float(err.max()) and r[1] == int(err.argmax())
        assert not math.isnan(r[2])


def test_version_says_which_compare_path_runs():
    argv = [sys.executable, "-m", "lar_prec", "--version"]
    on = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                        env={**os.environ, "LAR_PREC_NO_KERNEL": "0"})
    off = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "LAR_PREC_NO_KERNEL": "1"})
    assert on.returncode == 0 and off.returncode == 0
    built = importlib.util.find_spec("lar_prec.compare.engine._kernel") is not None
    assert ("(compare: C kernel)" in on.stdout) == built, on.stdout
    assert "numpy path: LAR_PREC_NO_KERNEL is set" in off.stdout
