"""Mixed-precision models (issue 23): chosen operators in float32, the rest as an fp16 option runs them.

On real cases and real runs of the bundled load_and_run: an empty keep-list computes exactly
what ``--enable-ioc16`` / ``--enable-io16xc32`` compute (naive kernels, bit for bit), keeping
every operator gives the plain model, and keeping cnn's max pooling (wrong under ioc16's
float16 default kernel on some CPUs) in float32 leaves the output within float16 tolerance of
the naive float32 reference, with dumps that show which operator ran in which precision and
pair by name with the plain model's.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_lar
from lar_prec.diagnosis.graphinfo import describe_model
from lar_prec.errors import UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.diagnosis.mixed import fp16_fraction, write_mixed_model
from lar_prec.lar.mixed_rewrite import KeepList
from lar_prec.compare.metrics import max_megengine_err
from lar_prec.compare.namepair import pair_by_name

#: a few float16 units in MegEngine's metric: what float16 storage alone leaves on cnn's
#: softmax output (values in [0, 1])
TOL = 4 * 2.0 ** -10
NAIVE = {"MGB_USE_MEGDNN_DBG": "2"}


def _run(case, model: Path, out: Path, env=None, flags=()) -> DumpFolder:
    run_lar(model, case.input_specs(), out, env=env, flags=tuple(flags))
    return DumpFolder(out)


def _by_name(folder: DumpFolder) -> dict:
    """Name -> dump; the last producer of a repeated name (a TypeCvt back to float32)."""
    return {d.var.name: d for d in folder}


def _err(a, b) -> float:
    return max_megengine_err(np.asarray(a.array(), np.float32), np.asarray(b.array(), np.float32))


@pytest.mark.megengine
@pytest.mark.parametrize("case_name,mode", [("cnn", "ioc16"), ("cnn", "io16xc32"), ("resnet", "io16xc32"),
                                            ("attention", "ioc16")])
def test_an_empty_keep_list_computes_bit_for_bit_what_the_fp16_option_computes(manifest, lar_dump, tmp_path,
                                                                                case_name, mode):
    case = manifest[case_name]
    mixed = write_mixed_model(case.model, tmp_path / "mixed.mge", KeepList(), mode)
    assert mixed.kept == () and mixed.conversions == () and mixed.float16
    option = _by_name(DumpFolder(lar_dump(case_name, "naive", flags=(f"--enable-{mode}",))))
    ours = _by_name(_run(case, mixed.path, tmp_path / "dump", env=NAIVE))
    assert set(ours) == set(option)
    differ = [n for n, d in option.items() if d.array().tobytes() != ours[n].array().tobytes()
              or d.var.dtype != ours[n].var.dtype]
    assert differ == []


@pytest.mark.megengine
def test_keeping_every_operator_gives_the_plain_model(manifest, lar_dump, tmp_path):
    case = manifest["cnn"]
    g = describe_model(case.model, tmp_path / "graph.json")
    types = sorted({o.type for o in g.computing()})
    mixed = write_mixed_model(case.model, tmp_path / "mixed.mge", KeepList(types=tuple(types)), "ioc16")
    assert mixed.float16 == () and mixed.conversions == ()
    plain = _by_name(DumpFolder(lar_dump("cnn", "naive")))
    ours = _by_name(_run(case, mixed.path, tmp_path / "dump", env=NAIVE))
    assert {n: d.var.dtype for n, d in ours.items()} == {n: d.var.dtype for n, d in plain.items()}
    assert [n for n, d in plain.items() if d.array().tobytes() != ours[n].array().tobytes()] == []


@pytest.mark.megengine
@pytest.mark.parametrize("mode", ["ioc16", "io16xc32"])
def test_keeping_cnns_max_pooling_in_float32_keeps_the_output_within_float16_tolerance(manifest, lar_dump,
                                                                                       tmp_path, mode):
    case = manifest["cnn"]
    mixed = write_mixed_model(case.model, tmp_path / "mixed.mge", KeepList(instances=("Pooling[0]",)), mode)
    assert mixed.kept == (("Pooling[0]", "instance Pooling[0]"),)
    # float16 in, float32 pooling, float16 out: one conversion on each side of it
    assert mixed.conversions == ("RELU[0].to_f32", "Pooling[0].to_f16")
    ref_folder = DumpFolder(lar_dump("cnn", "naive"))
    ref = _by_name(ref_folder)
    folder = _run(case, mixed.path, tmp_path / "dump")  # default kernels
    ours = _by_name(folder)

    # every computed var of the plain model pairs by name with the mixed model's
    pairing = pair_by_name([d.var for d in ref_folder], [d.var for d in folder])
    assert pairing.unpaired_a == ()
    # the dumps show the precision each operator ran in
    for d in ref_folder:
        if d.var.opr_type in ("Host2DeviceCopy", "ImmutableTensor"):
            continue
        want = "Float32" if d.var.name in ("Pooling[0]", "Softmax") else "Float16"
        assert ours[d.var.name].var.dtype == want, d.var.name
    assert ours["Softmax"].var.opr_type == "TypeCvt"  # the output converted back, as under the option

    # the pooling in float32 adds no error to what its float16 input carries, and the output
    # stays within float16 tolerance of the naive float32 reference
    assert _err(ref["Pooling[0]"], ours["Pooling[0]"]) <= _err(ref["RELU[0]"], ours["RELU[0]"])
    out_err = _err(ref["Softmax"], ours["Softmax"])
    option = _by_name(DumpFolder(lar_dump("cnn", "default", flags=(f"--enable-{mode}",))))
    assert out_err <= TOL, (f"mixed output error {out_err:.3g} > {TOL:.3g} (plain --enable-{mode}: "
                            f"{_err(ref['Softmax'], option['Softmax']):.3g})")


@pytest.mark.megengine
def test_operators_are_kept_by_type_and_by_var_id_as_by_name(manifest, tmp_path):
    case = manifest["cnn"]
    g = describe_model(case.model, tmp_path / "graph.json")
    by_type = write_mixed_model(case.model, tmp_path / "t.mge", KeepList(types=("Pooling",)))
    assert [n for n, _ in by_type.kept] == ["Pooling[0]", "Pooling[1]"]
    pool0 = next(v.id for v in g.vars.values() if v.name == "Pooling[0]")
    by_id = write_mixed_model(case.model, tmp_path / "i.mge", KeepList(ids=(pool0,)))
    assert by_id.kept == (("Pooling[0]", f"id {pool0}"),)
    assert "Pooling[0]" not in by_id.float16 and "Pooling[1]" in by_id.float16


@pytest.mark.megengine
def test_a_keep_list_entry_that_names_no_operator_is_a_usage_error(manifest, tmp_path):
    case = manifest["cnn"]
    with pytest.raises(UsageError, match=r"names no operator.*instance Pooling\[7\].*type Resize"):
        write_mixed_model(case.model, tmp_path / "m.mge", KeepList(instances=("Pooling[7]", "Pooling[0]"),
                                                                    types=("Resize",)))
    assert not (tmp_path / "m.mge").exists()


def test_keep_list_json_round_trips_and_rejects_other_objects():
    keep = KeepList(instances=("Pooling[0]",), ids=(18,), types=("SoftmaxForward",))
    assert KeepList.from_json(json.loads(json.dumps(keep.to_json()))) == keep
    for bad in ({}, {"schema": "lar-prec.keep/1"}, {"schema": "lar-prec.keep/1", "float32": {"ids": ["18"]}},
                {"schema": "lar-prec.keep/1", "float32": {"instances": "Pooling[0]"}}, []):
        with pytest.raises(UsageError, match="keep.json"):
            KeepList.from_json(bad, "keep.json")


@pytest.mark.megengine
def test_fraction_of_compute_left_in_float16_on_cnn(manifest, tmp_path):
    g = describe_model(manifest["cnn"].model, tmp_path / "graph.json")
    # cases/build.py's cnn: conv 3->16 3x3 on 32x32, conv 16->32 3x3 on 16x16, linear 2048->10
    c1, c2, fc = 16 * 32 * 32 * 3 * 9, 32 * 16 * 16 * 16 * 9, 10 * 2048
    pool = fp16_fraction(g, KeepList(instances=("Pooling[0]",)))
    assert (pool.macs_total, pool.macs_float16) == (c1 + c2 + fc, c1 + c2 + fc)
    # float operators: 2 conv, 2 bias+relu, 2 pooling, reshape, matmul, bias add, softmax
    assert (pool.oprs_total, pool.oprs_float16) == (10, 9)
    conv = fp16_fraction(g, KeepList(instances=("c2.Convolution",)))
    assert conv.macs == pytest.approx((c1 + fc) / (c1 + c2 + fc))
    assert fp16_fraction(g, KeepList(types=("ConvolutionForward", "MatrixMul"))).macs == 0.0


@pytest.mark.megengine
def test_the_cores_read_their_records_without_megengine(manifest, tmp_path):
    """Only the graph record and the rewrite need MegEngine (child processes): the keep-list,
    the fractions, the oracle and the quantization analysis import and run without it."""
    import subprocess
    import sys

    from conftest import ROOT
    from test_imports import BLOCK_MEGENGINE

    describe_model(manifest["cnn"].model, tmp_path / "graph.json")
    code = BLOCK_MEGENGINE + (
        "import lar_prec.diagnosis.oracle, lar_prec.diagnosis.quantinfo\n"
        "from lar_prec.diagnosis.graphinfo import read_graph_info\n"
        "from lar_prec.lar.mixed_rewrite import KeepList\nfrom lar_prec.diagnosis.mixed import fp16_fraction\n"
        f"g = read_graph_info({str(tmp_path / 'graph.json')!r})\n"
        "print(fp16_fraction(g, KeepList(types=('Pooling',))).oprs_float16)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert proc.stdout.strip() == "8"


@pytest.mark.parametrize("make,words", [
    (lambda p: __import__("os").mkfifo(p), "is not a regular file (a FIFO)"),
    (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "is nested deeper than Python's JSON parser goes"),
], ids=["fifo", "nested-100000"])
def test_the_rewrite_child_reads_its_keep_list_as_every_reader_does(manifest, tmp_path, make, words):
    """Issue 41 #5: `python -m lar_prec.lar.mixed_rewrite MODEL OUT --keep FIFO` hung forever, and a
    keep.json nested 100,000 deep gave a traceback and exit 1 ("MegEngine refused"): one line, exit 2."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    keep = tmp_path / "keep.json"
    make(keep)
    proc = subprocess.run([sys.executable, "-m", "lar_prec.lar.mixed_rewrite", str(manifest["cnn"].model),
                           str(tmp_path / "out.mge"), "--keep", str(keep)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"mixed_rewrite: error: keep-list {keep} {words}"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and not (tmp_path / "out.mge").exists()
