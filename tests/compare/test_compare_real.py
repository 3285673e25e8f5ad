"""lar_prec.compare on real dumps of the built cases (bundled load_and_run, naive and default
kernels): float32 noise stays under the automatic threshold, and MegEngine's own
``compare_binary_iodump`` is the oracle for ``max_err`` and the ``--format megengine`` text.
Synthetic arrays and folders: test_compare.py.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compare_helpers import FLOAT32_CASES, computed_float_vars, copy_dump, inject_fault, pick_spread, rewrite_var
from lar_prec.compare.folders import compare_folders
from lar_prec.diagnosis.megcompat import megengine_text
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import dump_file_name

PY = sys.executable


# ============================================================================ real dumps


@pytest.fixture(scope="module")
def real_pairs(lar_dump):
    """Naive and default binary dumps of every float32 case (plus fp16, int_ops, quantized)."""
    out = {}
    for case in FLOAT32_CASES + ("fp16", "int_ops", "quantized", "quant_mobile"):
        out[case] = (lar_dump(case, "naive"), lar_dump(case, "default"))
    return out


@pytest.mark.megengine
def test_naive_vs_default_is_quiet_under_auto(real_pairs):
    for case, (naive, default) in real_pairs.items():
        cmp = compare_folders(naive, default)
        bad = [(d.id, d.status, d.max_err, d.threshold) for d in cmp if d.status != "ok"]
        assert bad == [], f"{case}: {bad} ({cmp.threshold.reason})"
        assert len(cmp) == len(DumpFolder(naive))


@pytest.mark.megengine
def test_float32_noise_is_real_and_below_threshold(real_pairs):
    # the comparison is not trivially quiet: naive and default really differ in float32
    worst = 0.0
    for case in FLOAT32_CASES:
        cmp = compare_folders(*real_pairs[case])
        worst = max(worst, max(d.norm_err or 0.0 for d in cmp))
        assert max(d.max_err or 0.0 for d in cmp) > 0, case
    assert 1e-7 < worst < compare_folders(*real_pairs["cnn"]).threshold.value


@pytest.mark.megengine
def test_max_err_matches_compare_binary_iodump_check(real_pairs):
    """MegEngine's own check(): passes at our max_err, fails one float32 step below it."""
    from megengine.tools.compare_binary_iodump import check, load_tensor_binary

    for case in ("cnn", "attention"):
        naive, default = real_pairs[case]
        cmp = compare_folders(naive, default)
        for d in cmp:
            if not d.max_err:
                continue
            v0, _ = load_tensor_binary(str(Path(naive) / dump_file_name(d.id)))
            v1, _ = load_tensor_binary(str(Path(default) / dump_file_name(d.id)))
            check(v0, v1, "x", d.max_err)
            with pytest.raises(AssertionError, match="not equal"):
                check(v0, v1, "x", float(np.nextafter(np.float32(d.max_err), np.float32(0))))


def _mge_compare(a: Path, b: Path, e: float) -> str:
    p = subprocess.run([PY, "-m", "megengine.tools.compare_binary_iodump", str(a), str(b), "-e", repr(e)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


@pytest.mark.megengine
@pytest.mark.parametrize("case", ["cnn", "attention", "fastrun_shake"])
def test_megengine_format_is_byte_identical(real_pairs, tmp_path, case):
    naive, default = real_pairs[case]
    faulty = tmp_path / "faulty"
    victim = pick_spread(computed_float_vars(DumpFolder(default)))[1]
    inject_fault(Path(default), faulty, victim, 1e-2)
    for a, b, e in ((naive, default, 1e-7), (naive, faulty, 1e-3), (naive, faulty, 1e-6)):
        ours = "".join(block + "\n" for block in megengine_text(compare_folders(a, b, threshold=e)))
        assert ours == _mge_compare(Path(a), Path(b), e)


@pytest.mark.megengine
def test_megengine_format_with_input_dumps(lar_dump):
    """MGB_DUMP_INPUT folders: the -inp files are paired and printed like the original."""
    naive = lar_dump("cnn", "naive", env={"MGB_DUMP_INPUT": "1"})
    default = lar_dump("cnn", "default", env={"MGB_DUMP_INPUT": "1"})
    assert DumpFolder(naive).input_files
    cmp = compare_folders(naive, default, threshold=1e-7)
    ours = "".join(block + "\n" for block in megengine_text(cmp))
    assert ours == _mge_compare(Path(naive), Path(default), 1e-7)
    assert "-inp" in ours


@pytest.mark.megengine
def test_real_int_and_quantized_cases(real_pairs, tmp_path):
    for case in ("int_ops", "quantized", "quant_mobile"):
        naive, default = real_pairs[case]
        cmp = compare_folders(naive, default)
        kinds = {d.dtype for d in cmp}
        assert not cmp.diverged, case
        if case in ("quantized", "quant_mobile"):
            q = [d for d in cmp if d.dtype.startswith("Quantized")]
            assert q and all(d.scale_unknown for d in q)
        else:
            assert {"Int32", "Bool"} <= kinds
    # one flipped Bool element diverges exactly there
    naive, default = real_pairs["int_ops"]
    bad = copy_dump(Path(default), tmp_path / "int_bad")
    bvar = next(d for d in compare_folders(naive, default) if d.dtype == "Bool")
    vals = np.array(DumpFolder(bad)[bvar.id].array())
    vals.flat[3] = not vals.flat[3]
    rewrite_var(bad, bvar.id, vals)
    d = compare_folders(naive, bad)[bvar.id]
    assert d.status == "divergent" and d.n_diff == 1
    assert d.worst_index == tuple(int(i) for i in np.unravel_index(3, vals.shape))


@pytest.mark.megengine
def test_one_quantization_step_is_its_own_kind(real_pairs, tmp_path):
    """quant_mobile (int8 from MegEngine's QAT API): raw integers one step apart in the
    depthwise output are a kernel's rounding, counted apart and not a divergence; three steps
    stay a fault with that var as the root (issue 23 #3). Only in auto mode: a fixed threshold
    (e.g. 0, bitwise) keeps every difference."""
    from lar_prec.compare.folders import ONE_STEP_NOTE
    from lar_prec.diagnosis.tree import VarTree

    naive, default = real_pairs["quant_mobile"]
    dw = next(d.id for d in DumpFolder(default) if d.var.name == "dw.ConvBias")
    raw = np.array(DumpFolder(default)[dw].array())
    for steps in (1, 3):
        out = copy_dump(Path(default), tmp_path / f"s{steps}")
        bumped = raw.astype(np.int16)
        bumped.flat[::7] += np.where(bumped.flat[::7] < 100, steps, -steps)
        rewrite_var(out, dw, bumped.astype(raw.dtype))
        cmp = compare_folders(naive, out)
        d = cmp[dw]
        assert d.max_abs_err == steps and d.n_diff == len(raw.flat[::7])
        tree = VarTree(cmp.diffs, comparison=cmp)
        if steps == 1:
            assert d.status == "ok" and ONE_STEP_NOTE in d.note and not cmp.diverged
            assert any("differ by exactly one quantization step" in n and "dw.ConvBias" in n for n in cmp.notes)
            assert compare_folders(naive, out, threshold=0)[dw].status == "divergent"
        else:
            assert d.status == "divergent" and tree.root_ids() == (dw,)
            assert not any("quantization step" in n for n in cmp.notes)
