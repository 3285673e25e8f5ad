"""The dump-only recheck in the C kernel (issue 40 #6) against its numpy twin.

A float32 convolution or matrix product the edge rule names is recomputed in float64 by the
kernel (``explain.recompute_f32``), without numpy; ``explain.recompute`` does it with numpy and
stays the reference. On real runs of the cases, clean and with a fault born at one operator,
both must find the same parameters, the same verdict (``made_here``) and the same rounding
units up to the float64 sums' order.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from compare_helpers import inject_fault
from lar_prec.compare.engine.scan import KERNEL
from lar_prec.compare.explain import IN_KERNEL, kernel_plan, recompute, recompute_f32
from lar_prec.dumps.folder import DumpFolder

pytestmark = pytest.mark.skipif(not hasattr(KERNEL, "recheck_f32"), reason="the C kernel is not built")

#: cases with convolutions (dense, grouped, strided) and matrix products (attention, recurrent)
CASES = ("cnn", "resnet", "mobilenetv3", "attention", "mlp", "vit", "gru_topk")


def _kernel_vars(fa: DumpFolder, fb: DumpFolder):
    """Each float32 var the kernel recomputes, with its inputs on both sides."""
    for vid in fa.ids:
        a = fa[vid]
        if a.var.opr_type not in IN_KERNEL or vid not in fb or a.dtype.name != "Float32":
            continue
        ins = fa.inputs_of(vid)
        if not all(u in fa and u in fb and fa[u].dtype.name == "Float32" for u in ins):
            continue
        plan = kernel_plan(a.var.opr_type, [fa[u].shape for u in ins], a.shape)
        if plan is not None and plan[2]:
            yield vid, a.var.opr_type, plan, ins


def _same_units(x: float, y: float) -> bool:
    return x == y or (math.isfinite(x) and abs(x - y) <= 1e-6 * max(abs(x), abs(y)))


def _fault_at_a_kernel_var(a: Path, dst: Path) -> int:
    """A copy of ``a`` whose first recomputable var not all zero is off by 1e-3 there only."""
    fa = DumpFolder(a)
    vid = next(v for v, _t, _p, _ins in _kernel_vars(fa, fa) if abs(fa[v].array()).max() > 0)
    inject_fault(a, dst, vid, 1e-3, only=True)
    return vid


@pytest.mark.megengine
@pytest.mark.parametrize("case", CASES)
def test_the_kernel_recomputes_what_numpy_recomputes(lar_dump, tmp_path, case):
    naive = Path(lar_dump(case, "naive"))
    faulted = tmp_path / "fault"
    bad = _fault_at_a_kernel_var(naive, faulted)
    for other in (Path(lar_dump(case, "default")), faulted):
        fa, fb = DumpFolder(naive), DumpFolder(other)
        seen = 0
        for vid, opr_type, plan, ins in _kernel_vars(fa, fb):
            ya, yb = fa[vid], fb[vid]
            xa, xb = [fa[u] for u in ins], [fb[u] for u in ins]
            want = recompute(opr_type, ya.array(), [u.array() for u in xa], yb.array(), [u.array() for u in xb], "float32")
            got = recompute_f32(opr_type, plan, ya.raw(), [u.raw() for u in xa], yb.raw(), [u.raw() for u in xb])
            assert (want is None) == (got is None), (case, vid)
            if want is None:
                continue
            seen += 1
            assert got.how == want.how, (case, vid)
            assert _same_units(got.units_a, want.units_a) and _same_units(got.units_b, want.units_b), (case, vid, got, want)
            assert got.made_here() == want.made_here(), (case, vid, got, want)
            if other == faulted and vid == bad:
                assert got.made_here(), (case, vid, got)  # the fault is born here: more than rounding
        assert seen > 0, case


@pytest.mark.megengine
@pytest.mark.parametrize("case", ["resnet", "attention"])
def test_the_recheck_of_convolutions_and_products_imports_no_numpy(lar_dump, tmp_path, case):
    # the edge rule's recheck of every recomputable var, as the dump-only rule calls it (headers
    # read by the kernel, values recomputed by it): no numpy, and what numpy finds
    naive = Path(lar_dump(case, "naive"))
    faulted = tmp_path / "fault"
    _fault_at_a_kernel_var(naive, faulted)
    code = ("import json, sys\n"
            "from lar_prec.compare.folders import compare_folders\n"
            "from lar_prec.compare.recheck import rechecker\n"
            "from lar_prec.compare.explain import IN_KERNEL\n"
            "from lar_prec.dumps.folder import DumpFolder\n"
            "c = compare_folders(sys.argv[1], sys.argv[2])\n"
            "vars = [d for d in c.diffs if d.opr_type in IN_KERNEL]\n"
            "fa, fb = DumpFolder(sys.argv[1]), DumpFolder(sys.argv[2])\n"
            "got = rechecker(fa, fb, {d.id: d.id for d in vars})(vars)\n"
            "print(json.dumps({'numpy': 'numpy' in sys.modules, 'got': [[d.id, None if r is None else "
            "[r.units_a, r.units_b, r.how]] for d, r in zip(vars, got)]}))\n")
    out = subprocess.run([sys.executable, "-c", code, str(naive), str(faulted)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    assert res["numpy"] is False
    fa, fb = DumpFolder(naive), DumpFolder(faulted)
    found = 0
    for vid, r in res["got"]:
        ins = fa.inputs_of(vid)
        want = recompute(fa[vid].var.opr_type, fa[vid].array(), [fa[u].array() for u in ins], fb[vid].array(),
                         [fb[u].array() for u in ins], "float32")
        assert (r is None) == (want is None), vid
        if r is not None:
            found += 1
            assert r[2] == want.how and _same_units(r[0], want.units_a) and _same_units(r[1], want.units_b), (vid, r, want)
    assert found > 0


@pytest.mark.megengine
def test_headers_the_kernel_reads_for_the_recheck_are_the_folders_own(lar_dump, tmp_path):
    # read_heads caches what the folder's own reader makes of each file; a file it cannot take
    # (not a dump) is left to that reader, which says what is wrong with it when asked
    from lar_prec.compare.engine.batch import read_heads
    from lar_prec.errors import DumpFormatError

    naive, default = Path(lar_dump("resnet", "naive")), Path(lar_dump("resnet", "default"))
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in default.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    ids = DumpFolder(naive).ids
    victim = ids[len(ids) // 2]
    (broken / Path(DumpFolder(default).files()[victim]).name).write_bytes(b"junk")
    fa, fb = DumpFolder(naive), DumpFolder(broken)
    read_heads(fa, fb, [(v, v) for v in ids])
    ra, rb = DumpFolder(naive), DumpFolder(broken)
    fields = ("title", "dtype", "shape", "size", "data_offset", "nbytes", "var_id", "input_ids", "var")
    for v in ids:
        assert [getattr(fa[v], k) for k in fields] == [getattr(ra[v], k) for k in fields], v
        if v == victim:
            with pytest.raises(DumpFormatError):
                fb[v]  # noqa: B018
            continue
        assert [getattr(fb[v], k) for k in fields] == [getattr(rb[v], k) for k in fields], v
