"""Local ("single") error of every operator, on real cases and real runs (issue 14).

Reference = naive kernels, test = default kernels, each a fresh bundled load_and_run process.
Faults are injected by rewriting a copy of a case model (a constant times 1+1e-3), so the
error really propagates through MegEngine.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_lar
from lar_prec.errors import UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.compare.growth import DATA_MOVEMENT
from lar_prec.diagnosis.floors import TERMS_C, local_roots, noise_floors, reduction_length
from lar_prec.diagnosis.local import (build_layerwise, isolation_check, local_errors, magnitude_ids, megengine_rel,
                                      output_ids, scale_constant)
from lar_prec.diagnosis.local_bounds import bound_of
from lar_prec.diagnosis.replay import make_repro, make_repros, replay


@pytest.fixture(scope="module")
def clean(manifest, lar_dump, tmp_path_factory):
    """``clean(case)`` -> LocalResult of default against naive on the unchanged model (cached)."""
    cache = {}

    def make(case: str):
        if case not in cache:
            out = tmp_path_factory.mktemp(f"local-{case}")
            cache[case] = local_errors(manifest[case].model, lar_dump(case, "naive"), "default", out_dir=out,
                                       test_dump=lar_dump(case, "default"))
        return cache[case]

    return make


@pytest.fixture(scope="module")
def fault(manifest, lar_dump, tmp_path_factory):
    """resnet with blocks.1.a.weight x(1+1e-3), run under default, local errors against naive."""
    case = manifest["resnet"]
    base = tmp_path_factory.mktemp("fault")
    model = scale_constant(case.model, "blocks.1.a.weight", 1 + 1e-3, base / "faulty.mge")
    run_lar(model, case.input_specs(), base / "test-dump")
    result = local_errors(model, lar_dump("resnet", "naive"), "default", out_dir=base / "local",
                          test_dump=base / "test-dump")
    return result


@pytest.mark.parametrize("case", ["cnn", "attention", "int_ops", "quantized", "quant_mobile"])
def test_clean_case_passes_the_three_checks_and_has_no_local_root(clean, case):
    result = clean(case)
    assert [(c.name, c.status, c.failures) for c in result.checks] == [
        ("isolation", "pass", ()), ("reference_self", "pass", ()), ("test_fed", "pass", ())]
    assert result.vars and all(v.local_err is not None for v in result.vars)
    assert local_roots(result).roots == ()
    # data movement computes nothing: run on the reference's own inputs it is bit-exact
    moves = [v for v in result.vars if v.opr_type in DATA_MOVEMENT]
    if case in ("cnn", "attention"):
        assert moves
    assert all(v.local_err == 0.0 for v in moves), [(v.name, v.local_err) for v in moves if v.local_err]


def test_local_error_is_where_error_is_made_not_where_it_is_seen(clean):
    # attention: elemwise/reshape vars carry accumulated error that they did not make
    result = clean("attention")
    inherited = [v for v in result.vars if v.entire_err and v.local_err == 0.0]
    assert inherited, "expected vars whose accumulated error is only inherited"
    made = {v.opr_type for v in result.vars if v.local_err}
    assert made, "default kernels differ from naive somewhere"
    assert made <= {"MatrixMul", "BatchedMatrixMul", "SoftmaxForward", "LayerNormForward", "Reduce",
                    "ConvolutionForward", "Elemwise"}
    verdict = local_roots(result)
    # no root upstream (a clean pair): what they carry is rounding within every floor, noise,
    # not "inherited" from nothing (issue 20 #7: inherited with inherited_from [])
    assert {verdict.labels[v.id] for v in inherited} == {"noise"}
    assert not any(verdict.inherited_from.values())


def test_fault_in_one_convolution_is_the_only_local_root(fault):
    verdict = local_roots(fault)
    assert [r.name for r in verdict.roots] == ["blocks.1.a.Convolution"]
    root = verdict.roots[0]
    assert 5e-4 < root.local_err < 2e-3 and root.margin > 50
    downstream = [v for v in fault.vars if v.id > root.id and v.entire_err is not None and v.entire_err > 1e-4]
    assert len(downstream) >= 5, "the fault should be seen far downstream"
    for v in downstream:
        assert v.local_err <= verdict.floors[v.id], (v.name, v.local_err, verdict.floors[v.id])
        assert verdict.labels[v.id] == "inherited"
        assert root.id in verdict.inherited_from[v.id]
    # the layerwise model of the faulty model differs from the reference run exactly there
    assert [k for k, _ in fault.check("reference_self").failures] == [root.id]
    assert fault.check("test_fed").status == "pass"
    record = json.loads((fault.local_dump.parent.parent / "local.json").read_text())
    assert [r["name"] for r in record["roots"]] == [root.name] and record["roots"][0]["margin"] > 50
    labels = {v["id"]: v["label"] for v in record["vars"]}
    assert all(labels[v.id] == "inherited" for v in downstream)


def test_repro_folder_reproduces_the_divergence(fault, tmp_path):
    root = local_roots(fault).roots[0]
    repros = make_repros(fault, tmp_path / "repros")
    assert [r.var_id for r in repros] == [root.id]
    repro = repros[0]
    assert repro.dir == tmp_path / "repros" / f"repro-{root.id}"
    names = {p.name for p in repro.dir.iterdir()}
    assert {"model.mge", "inputs", "reference.npy", "observed.npy", "repro.json", "README.md"} <= names
    rec = json.loads((repro.dir / "repro.json").read_text())
    assert "load_and_run model.mge" in rec["test"]["commands"]["load_and_run"]
    assert "python -m lar_prec.lar model.mge" in rec["test"]["commands"]["bundled"]
    assert megengine_rel(np.load(repro.dir / "observed.npy"), np.load(repro.dir / "reference.npy")) == root.local_err
    result = replay(repro.dir)
    assert result.reproduced and result.err == root.local_err
    # the command line, from another folder
    proc = subprocess.run([sys.executable, "-m", "lar_prec.diagnosis.replay", str(repro.dir)], cwd=tmp_path, timeout=300,
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stderr[-2000:]  # 1: the divergence is reproduced (as lar-prec replay)
    assert proc.stdout.startswith("reproduced") and "reproduced bit for bit" in proc.stdout


def test_repro_of_a_clean_operator_reproduces_the_reference_bit_for_bit(clean, tmp_path):
    result = clean("cnn")
    conv = next(v for v in result.vars if v.opr_type == "ConvolutionForward")
    repro = make_repro(result, conv.id, tmp_path / "r")
    again = replay(repro.dir)
    assert again.reproduced and again.reference_bitwise is True


def test_floors_exact_for_data_movement_and_selection_and_in_rounding_units_for_sums(clean):
    result = clean("cnn")
    floors = noise_floors(result)
    lw = {m.id: m for m in result.layerwise.measured}
    for v in result.vars:
        if v.opr_type in DATA_MOVEMENT or lw[v.id].mode == "MAX":  # max pooling selects: no rounding
            assert floors[v.id] == 0.0, v.name
    convs = sorted((reduction_length(lw[v.id]), v) for v in result.vars if v.opr_type == "ConvolutionForward")
    assert [k for k, _ in convs] == [27, 144]  # 3x3 kernels over 3 and 16 channels
    for _k, v in convs:
        # each sum's floor is TERMS_C rounding units of its worst element, measured on the
        # magnitude of its own terms: local error above the floor exactly when units > TERMS_C
        assert v.bound is not None and v.bound.kind == "terms" and v.bound.dtype == "float32"
        assert 0 < v.bound.units < TERMS_C
        assert floors[v.id] == pytest.approx(v.local_err * TERMS_C / v.bound.units)
    mm = next(v for v in result.vars if v.opr_type == "MatrixMul")
    assert reduction_length(lw[mm.id]) == 2048 and mm.bound is not None


def test_float16_compute_dtype_widens_every_float_floor(clean):
    # sweep's ioc16/io16xc32: float operators compute in float16 from inputs rounded to it
    result = clean("cnn")
    f32, f16 = noise_floors(result), noise_floors(result, compute_dtype="float16")
    for v in result.vars:
        assert f16[v.id] >= f32[v.id]
        if v.opr_type in DATA_MOVEMENT:  # exact in float32; one float16 ulp of the rounded input
            assert f32[v.id] == 0.0 and 0.0 < f16[v.id] <= 2.0 ** -10
    # an elementwise operator measured as computed in float16: float16's units of its formula,
    # plus what rounding each input to float16 changes (an addition with cancellation keeps it)
    lw = result.layerwise
    ref, local = DumpFolder(result.ref_dump), DumpFolder(result.local_dump)
    outs, mags = output_ids(local), magnitude_ids(local)
    elems = [m for m in lw.measured if m.opr_type == "Elemwise"]
    assert elems
    for m in elems:
        b32, why32 = bound_of(lw, m, ref, local, outs, mags, None)
        b16, why16 = bound_of(lw, m, ref, local, outs, mags, None, "float16")
        assert why32 is None and why16 is None and b32.dtype == "float32" and b16.dtype == "float16"
        assert b16.unit_scale >= b32.unit_scale * 2.0 ** 13 * 0.999
    # a sum's bound carries the dtype it was measured in (float32 here: the run computed in it)
    conv = [v.id for v in result.vars if v.opr_type == "ConvolutionForward"]
    assert conv and all(f16[i] == f32[i] for i in conv)
    assert noise_floors(result, compute_dtype="float32") == f32
    with pytest.raises(ValueError, match="float64"):
        noise_floors(result, compute_dtype="float64")


def test_vars_without_reference_value_form_a_unit_with_their_consumer(manifest, lar_dump, tmp_path):
    # a reference dump without Pooling[0]'s value (as when lite fuses it away): the pooling
    # stays computed from the fed RELU[0], and c2.Convolution's local error is the unit's
    ref = tmp_path / "ref"
    shutil.copytree(lar_dump("cnn", "naive"), ref)
    pool = next(d for d in DumpFolder(ref) if d.var.name == "Pooling[0]")
    pool.path.unlink()
    result = local_errors(manifest["cnn"].model, ref, "default", out_dir=tmp_path / "out", checks=False)
    conv2 = next(v for v in result.vars if v.name == "c2.Convolution")
    assert conv2.isolated and result.layerwise.var(conv2.id).unit == (pool.id,)
    assert pool.id not in result.by_id() and dict(result.layerwise.kept)[pool.id] == "no reference value"
    assert result.check("isolation").status == "pass"
    assert conv2.local_err == next(v for v in clean_cnn_vars(manifest, lar_dump, tmp_path) if v.id == conv2.id).local_err
    assert [c.status for c in result.checks[1:]] == ["skipped", "skipped"]


def clean_cnn_vars(manifest, lar_dump, tmp_path):
    return local_errors(manifest["cnn"].model, lar_dump("cnn", "naive"), "default", out_dir=tmp_path / "clean",
                        checks=False).vars


def test_isolation_check_fails_on_a_graph_that_is_not_cut(clean, lar_dump):
    # the original model's own run: every operator reads what the one before it computed
    result = clean("cnn")
    lw = result.layerwise
    check = isolation_check(lw, DumpFolder(lar_dump("cnn", "default")), {m.id: m.ref_id for m in lw.measured})
    failing = {result.by_id()[k].name: why for k, why in check.failures}
    assert check.status == "fail"
    assert "reads Pooling[0]" in failing["c2.Convolution"] and "reads c2.Convolution" in failing["RELU[1]"]
    assert "c1.Convolution" not in failing  # it reads the model input and a weight


def test_test_fed_check_fails_when_the_test_dump_is_not_of_the_test_configuration(manifest, lar_dump, tmp_path):
    # fed with the naive run's values but run under default: convolutions cannot reproduce it
    result = local_errors(manifest["cnn"].model, lar_dump("cnn", "naive"), "default", out_dir=tmp_path,
                          test_dump=lar_dump("cnn", "naive", tag="second"))
    failing = {result.by_id()[k].opr_type for k, _ in result.check("test_fed").failures}
    assert result.check("test_fed").status == "fail" and "ConvolutionForward" in failing


def test_bad_inputs_name_the_file(tmp_path, lar_dump):
    with pytest.raises(UsageError, match="nope.mge does not exist"):
        build_layerwise(tmp_path / "nope.mge", lar_dump("cnn", "naive"), tmp_path / "o")
    with pytest.raises(UsageError, match="is not a folder"):
        build_layerwise(Path(__file__), tmp_path / "missing", tmp_path / "o")
    with pytest.raises(UsageError, match="repro.json"):
        replay(tmp_path)


def test_megengine_metric_and_nonfinite_values():
    a = np.array([1.0, 2.0, np.nan, np.inf], dtype=np.float32)
    assert megengine_rel(a, a) == 0.0
    assert megengine_rel(np.array([0.5, 4.0]), np.array([0.25, 5.0])) == 0.25
    assert megengine_rel(np.array([1.0, 2.0]), np.array([1.0, np.nan])) == math.inf


def test_fault_of_1e_5_in_a_matmul_is_rooted(manifest, lar_dump, tmp_path):
    case = manifest["attention"]
    model = scale_constant(case.model, "f1.weight", 1 + 1e-5, tmp_path / "faulty.mge")
    run_lar(model, case.input_specs(), tmp_path / "test-dump")
    result = local_errors(model, lar_dump("attention", "naive"), "default", out_dir=tmp_path / "local",
                          test_dump=tmp_path / "test-dump", checks=False)
    verdict = local_roots(result)
    assert [r.name for r in verdict.roots] == ["f1.MatrixMul"]
    assert verdict.roots[0].margin > 3


def _pinned_fast_run(model, inputs, dump):
    """A --fast-run test run writing its algorithm cache; the config that replays it."""
    from lar_prec.run.config import get_config

    cache = dump.parent / (dump.name + "-algo.cache")
    run_lar(model, inputs, dump, flags=("--fast-run", "--fast-run-algo-policy", str(cache)))
    return get_config("fast-run").with_extra(["--fast-run-algo-policy", str(cache)])


@pytest.mark.parametrize("case", ["fastrun_shake", "mlp"])
def test_fast_run_noise_is_not_a_root(manifest, lar_dump, tmp_path, case):
    # the layerwise run replays the test run's algorithm choices (its --fast-run-algo-policy
    # cache), as naive-vs-default does: unpinned, it profiled again and could pick others
    cfg = _pinned_fast_run(manifest[case].model, manifest[case].input_specs(), tmp_path / "test")
    result = local_errors(manifest[case].model, lar_dump(case, "naive"), cfg, out_dir=tmp_path / "o",
                          test_dump=tmp_path / "test")
    assert result.check("isolation").status == "pass" and result.check("reference_self").status == "pass"
    assert any(v.local_err for v in result.vars), "fast-run kernels differ from naive somewhere"
    assert local_roots(result).roots == ()


def test_fast_run_pinned_by_the_test_runs_cache_reproduces_the_test_dump(manifest, tmp_path, lar_dump):
    from lar_prec.run.config import get_config

    case = manifest["fastrun_shake"]
    cache = tmp_path / "algo.cache"
    run_lar(case.model, case.input_specs(), tmp_path / "test", flags=("--fast-run", "--fast-run-algo-policy", str(cache)))
    cfg = get_config("fast-run").with_extra(["--fast-run-algo-policy", str(cache)])
    result = local_errors(case.model, lar_dump("fastrun_shake", "naive"), cfg, out_dir=tmp_path / "o",
                          test_dump=tmp_path / "test")
    assert [c.status for c in result.checks] == ["pass", "pass", "pass"], result.checks
    assert local_roots(result).roots == ()


def test_a_small_second_fault_behind_a_large_one_is_its_own_root(manifest, lar_dump, tmp_path):
    case = manifest["resnet"]
    once = scale_constant(case.model, "blocks.0.a.weight", 1 + 1e-3, tmp_path / "one.mge")
    twice = scale_constant(once, "blocks.2.b.weight", 1 + 1e-5, tmp_path / "two.mge")
    run_lar(twice, case.input_specs(), tmp_path / "test")
    result = local_errors(twice, lar_dump("resnet", "naive"), "default", out_dir=tmp_path / "o",
                          test_dump=tmp_path / "test", checks=False)
    verdict = local_roots(result)
    assert [r.name for r in verdict.roots] == ["blocks.0.a.Convolution", "blocks.2.b.Convolution"]
    small = verdict.roots[1]
    # seen, the second conv's error is the first fault's (1e-3 >> 1e-5); made, it is its own
    assert small.entire_err > 1e-4 and 5e-6 < small.local_err < 2e-5


def test_under_fast_run_a_fault_is_rooted_not_the_noisy_convolutions_before_it(manifest, lar_dump, tmp_path):
    case = manifest["fastrun_shake"]
    model = scale_constant(case.model, "convs.8.weight", 1 + 1e-5, tmp_path / "faulty.mge")
    cfg = _pinned_fast_run(model, case.input_specs(), tmp_path / "test")
    result = local_errors(model, lar_dump("fastrun_shake", "naive"), cfg, out_dir=tmp_path / "o",
                          test_dump=tmp_path / "test", checks=False)
    assert [r.name for r in local_roots(result).roots] == ["convs.8.Convolution"]
    before = [v for v in result.vars if v.opr_type == "ConvolutionForward" and v.id < local_roots(result).roots[0].id]
    assert any(v.local_err for v in before), "fast-run convolutions before the fault make noise"


# ---------------------------------------------------------------------------------- helper children


def _group_child(tmp_path: Path) -> "tuple[list, Path]":
    """A helper child that leaves a grandchild in its process group (like a build that forks)."""
    pid = tmp_path / "grandchild.pid"
    return ["sh", "-c", f"sleep 60 & echo $! > {pid}.tmp && mv {pid}.tmp {pid}; wait"], pid


def test_run_child_kills_its_process_group_on_timeout(tmp_path):
    from lar_prec.errors import RunTimeout
    from lar_prec.diagnosis.local import child_env, run_child
    from proc_helpers import wait_for, wait_gone

    argv, pid = _group_child(tmp_path)
    with pytest.raises(RunTimeout, match="timeout of 1 s"):
        run_child(argv, child_env(), 1.0, "a helper", tmp_path / "log")
    wait_for(pid, 5)
    assert wait_gone(int(pid.read_text()), 5), "the grandchild survived the timeout"
    assert (tmp_path / "log" / "stderr.txt").is_file()


def test_run_child_is_stopped_by_an_interrupt_with_its_group(tmp_path):
    import threading

    from lar_prec.diagnosis.local import child_env, run_child
    from lar_prec.run.proc import interrupt_active_runs, reset_interrupt
    from proc_helpers import wait_for, wait_gone

    argv, pid = _group_child(tmp_path)

    def ctrl_c() -> None:  # what a workflow's main thread does on Ctrl-C
        wait_for(pid, 10)
        interrupt_active_runs()

    t = threading.Thread(target=ctrl_c)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_child(argv, child_env(), 60.0, "a helper", tmp_path / "log")
    finally:
        t.join()
        reset_interrupt()
    assert wait_gone(int(pid.read_text()), 5), "the grandchild survived the interrupt"


def test_run_child_failure_is_a_run_error_with_the_last_line(tmp_path):
    from lar_prec.errors import RunError
    from lar_prec.diagnosis.local import child_env, run_child

    with pytest.raises(RunError, match=r"failed \(exit 3\): boom") as info:
        run_child(["sh", "-c", "echo noise >&2; echo boom >&2; exit 3"], child_env(), 10.0, "a helper",
                  tmp_path / "log")
    assert info.value.run_dir == tmp_path / "log"
