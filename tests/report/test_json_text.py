"""A report var's JSON text (report/json_text.var_json_text, vars_json_texts): written by the C
kernel's json_rows where it can, it must be the text the json module writes for the same
object, byte for byte, and fall back to it for anything else (NaN, numpy scalars, an int in a
float field, extras)."""
from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.folders import compare_folders
from lar_prec.compare.records import VarDiff, new_diff
from lar_prec.report.json_text import var_json_text, vars_json_texts
from lar_prec.report.records import VAR_FIELDS, _fields_json, var_from_diff
from compare_helpers import dtype_corners

needs_kernel = pytest.mark.skipif(KERNEL is None, reason="the C kernel is not built (or LAR_PREC_NO_KERNEL=1)")
ENCODE = json.JSONEncoder(allow_nan=False).encode


def slow(d) -> str:
    return ENCODE(_fields_json(d, VAR_FIELDS))


@pytest.fixture(scope="module")
def diffs(tmp_path_factory):
    a, b = dtype_corners(tmp_path_factory.mktemp("corners"))
    out = []
    for thr in ("auto", 1e-3, 0.0):
        out += list(compare_folders(a, b, threshold=thr))
    return out


@needs_kernel
def test_compare_records_written_as_json_writes_them(diffs):
    assert any(d.status == "nonfinite" for d in diffs) and any(d.max_ulp is None for d in diffs)
    texts = [t for chunk in vars_json_texts(diffs, chunk=7) for t in chunk]
    assert texts == [slow(d) for d in diffs]
    assert [var_json_text(d) for d in diffs] == texts
    # the report records too (extras and optional keys take the json module)
    rvs = [var_from_diff(d) for d in diffs]
    rvs[0] = dataclasses.replace(rvs[0], extra={"x": 1}, runs_differing=3)
    assert [t for chunk in vars_json_texts(rvs) for t in chunk] == [slow(v) for v in rvs]


@needs_kernel
def test_values_json_would_write_differently_fall_back(diffs):
    d = diffs[0]
    odd = [
        {"max_err": math.nan}, {"cosine": math.inf}, {"max_err": np.float32(0.5)}, {"max_abs_err": 1},
        {"size": 3.0}, {"n_over": np.int64(4)}, {"shape": (np.int64(2), 3)}, {"shape": [2.0]}, {"scale_unknown": 1},
        {"note": np.str_("x")}, {"max_ulp": 7.0}, {"worst_index": ()},
    ]
    for ch in odd:
        x = new_diff({**d.__dict__, **ch})
        try:
            want = slow(x)
        except (TypeError, ValueError):
            continue
        assert var_json_text(x) == want, ch
        assert next(iter(vars_json_texts([x]))) == [want], ch


_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30) | st.sampled_from(
    ['"', "\\", "\b\f\n\r\t", "\x00\x1f\x7f", "\u00e9\u2028", "\U0001F600", "</script>"])


@needs_kernel
@settings(max_examples=300, deadline=None)
@given(name=_TEXT, note=_TEXT, x=st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False), n=st.integers(-2**63, 2**63 - 1),
       shape=st.lists(st.integers(0, 2**40), max_size=5))
def test_any_name_number_and_shape_as_json_writes_them(name, note, x, n, shape):
    # no subnormals drawn: a worker that imported MegEngine runs with flush-to-zero set
    d = VarDiff(id=n, name=name, opr=note, opr_type="Elemwise", dtype="Float32", shape=tuple(shape), inputs=(1, 2),
                status="ok", max_err=x, worst_a=-x, scale=abs(x), note=note, size=abs(n))
    assert var_json_text(d) == slow(d)
    assert json.loads(var_json_text(d))["name"] == name


@needs_kernel
def test_roots_written_as_json_writes_them(tmp_path):
    from compare_helpers import dtype_corners
    from lar_prec.diagnosis.tree import VarTree
    from lar_prec.report.model import from_tree
    from lar_prec.report.json_text import roots_json_texts
    from lar_prec.report.records import ROOT_FIELDS

    a, b = dtype_corners(tmp_path)
    roots = list(from_tree(VarTree.from_comparison(compare_folders(a, b, threshold=0.0))).roots)
    assert len(roots) >= 5
    roots[0] = dataclasses.replace(roots[0], extra={"why": "x"})
    roots[1] = dataclasses.replace(roots[1], note=None, amplification=math.nan, max_err=1)
    # roots with and without their optional keys share a chunk: one layout per set of keys
    roots[2] = dataclasses.replace(roots[2], module="backbone.stage1", module_how="its own name")
    roots[4] = dataclasses.replace(roots[4], module="head", module_how=None, inputs_equal=None)
    assert [t for chunk in roots_json_texts(roots, chunk=3) for t in chunk] == [ENCODE(_fields_json(r, ROOT_FIELDS)) for r in roots]


# ---- floats: Grisu3 in the kernel, Python's dtoa where Grisu3 is not sure

_FLOAT_CHECK = r"""
import math, sys
import numpy as np
from lar_prec.compare.engine.scan import KERNEL

rng = np.random.default_rng(int(sys.argv[1]))
n = int(sys.argv[2])
groups = {
    "random bits": rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64),
    "float32 values": rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
    "errors": np.abs(rng.standard_normal(n)) * 10.0 ** rng.integers(-12, 3, n),
    "subnormals": rng.integers(1, 2**52, n // 4, dtype=np.uint64).view(np.float64),
    "decimals": [float(f"{m}e{e}") for m, e in zip(rng.integers(1, 10**7, n // 4), rng.integers(-320, 300, n // 4))],
    "powers of 2": [math.ldexp(1.0, e) for e in range(-1074, 1024)],
    "powers of 10 and neighbours": [y for k in range(-323, 309) for x in (float(f"1e{k}"),)
                                    for y in (x, math.nextafter(x, 0), math.nextafter(x, math.inf))],
    "integers": [float(k) for k in range(-3000, 3000)] + [2.0**53 + k for k in range(-4, 5)] + [1e15, 1e16, 1e17],
    "layout edges": [1e-4, 9.999999999999999e-05, 1e-5, 1e16, 9999999999999998.0, 0.1, 1 / 3, 5e-324,
                     2.2250738585072014e-308, 1.7976931348623157e308, 0.0, -0.0, 123.456],
}
declined = 0
for name, xs in groups.items():
    xs = [float(x) for x in xs if math.isfinite(x)]
    xs += [-x for x in xs[:1000]]
    got = [t[6:-1] for t in KERNEL.json_rows(('{"x": ', "}"), [(x,) for x in xs], "f")]
    bad = [(x, g) for x, g in zip(xs, got) if g != repr(x)]
    assert not bad, (name, bad[:5])
    grisu = [KERNEL.grisu_repr(x) for x in xs]
    assert all(g is None or g == repr(x) for x, g in zip(xs, grisu)), name
    declined += sum(g is None for g in grisu)
print(declined)
"""


@needs_kernel
@pytest.mark.parametrize("seed", [1, 2])
def test_every_float_written_as_repr_writes_it(seed):
    # a fresh process: this one may run with MegEngine's flush-to-zero, which reads subnormals as 0
    proc = subprocess.run([sys.executable, "-c", _FLOAT_CHECK, str(seed), "200000"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) > 100  # Grisu3 declines some: those took Python's dtoa, and matched too


def test_the_kernels_powers_of_ten_are_the_nearest_64_bits():
    src = (Path(__file__).resolve().parents[2] / "lar_prec/compare/engine/_kernel.c").read_text()
    table = src[src.index("POW10[87] = {"):]
    rows = re.findall(r"\{0x([0-9a-f]{16})u, (-?\d+), (-?\d+)\}", table[: table.index("};")])
    assert len(rows) == 87
    for i, (f, e, k) in enumerate(rows):
        f, e, k = int(f, 16), int(e), int(k)
        assert k == -348 + 8 * i
        assert 2**63 <= f < 2**64
        exact = Fraction(10) ** k / Fraction(2) ** e
        assert abs(exact - f) <= Fraction(1, 2), k  # the 64 bits nearest 10^k


@needs_kernel
def test_rows_read_as_attributes_as_getattr_reads_them():
    class Row:
        def __init__(self) -> None:
            self.a, self.b = 1.5, "x"
            self.__dict__["c"] = "shadowed"  # a property of the class wins, as for getattr

        @property
        def c(self) -> str:
            return "property"

    class Slotted:
        __slots__ = ("a", "b", "c")

        def __init__(self) -> None:
            self.a, self.b, self.c = 2.0, "y", "z"

    prefixes, kinds = ('{"a": ', ', "b": ', ', "c": ', "}"), "fss"
    rows = [Row(), Slotted()]
    want = [ENCODE({"a": r.a, "b": r.b, "c": r.c}) for r in rows]
    assert KERNEL.json_rows(prefixes, rows, kinds, ("a", "b", "c")) == want
    assert want[0].endswith('"c": "property"}')
    with pytest.raises(AttributeError):
        KERNEL.json_rows(prefixes, [object()], kinds, ("a", "b", "c"))
    with pytest.raises(TypeError):
        KERNEL.json_rows(prefixes, rows, kinds, ("a", "b"))


_FLUSH_TO_ZERO_CHECK = r"""
import json, math
import megengine  # noqa: F401  (sets flush-to-zero in this process, as in any process that ran a model)
from lar_prec.compare.engine.scan import KERNEL
xs = [5e-324, -5e-324, 2.5e-310, -1e-310, 0.0, -0.0, 2.2250738585072014e-308, 1.5, -3e-300]
got = [t[6:-1] for t in KERNEL.json_rows(('{"x": ', "}"), [(x,) for x in xs], "f")]
want = [json.dumps(x) for x in xs]
assert got == want, (got, want)
print(want[0])
"""


@needs_kernel
@pytest.mark.megengine
def test_floats_written_as_json_writes_them_under_flush_to_zero():
    # MegEngine sets flush-to-zero: repr then writes a subnormal as 0.0, and so must the kernel
    proc = subprocess.run([sys.executable, "-c", _FLUSH_TO_ZERO_CHECK], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "0.0"  # the flush is on: otherwise this test checks nothing
