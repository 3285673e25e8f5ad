"""``lar-prec reduce`` on real runs: a stand-in load_and_run whose fault needs two operators in a
row (tests/wrapped_lar.py ``WRAPPED_LAR_PAIR_FAULT``), this machine's own kernel bugs where its
CPU has them, a finding that does not reproduce, and an analysis folder read as data.

Runs are few and counted: the stand-in caches its rewrites (``WRAPPED_LAR_CACHE``), the analyses
run without local error, and each real bug costs a sweep of one option and its reduction.
"""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from proc_helpers import user_lar
from lar_prec.errors import UsageError
from lar_prec.report.reduce import render_reduce_terminal
from lar_prec.workflows import naive_vs_default, sweep
from lar_prec.workflows.reduce.reduce import reduce, target_runs

pytestmark = pytest.mark.megengine


def cli(*args, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def pair(manifest, tmp_path_factory):
    """A naive-vs-default of cnn under a binary whose kernel of the convolution reading c2.weight is
    1e-3 off only when a ReLU consumes its output, and aborts when its output is the model's."""
    tmp = tmp_path_factory.mktemp("pair")
    (tmp / "cache").mkdir()
    lar = user_lar(tmp / "pair_load_and_run", WRAPPED_LAR_PAIR_FAULT="c2.weight:1e-3",
                   WRAPPED_LAR_PAIR_ALONE="crash", WRAPPED_LAR_CACHE=str(tmp / "cache"))
    case = manifest["cnn"]
    a = naive_vs_default(case.model, case.input_specs(), out=tmp / "nvd", lar=str(lar), local=False, html=False)
    assert [r.name for r in a.report.roots] == ["c2.Convolution"]
    return a.dir, lar


def test_a_fault_of_two_operators_in_a_row_reduces_to_exactly_the_pair(pair, tmp_path):
    adir, lar = pair
    r = reduce(adir, out=tmp_path / "r", lar=str(lar))
    d = r.data
    assert r.exit_code == 1 and d["outcome"]["verdict"] == "same"
    assert [k["name"] for k in d["kept"]] == ["c2.Convolution", "RELU[1]"]
    assert (d["operators_before"], d["operators_after"], d["operators_in_model"]) == (10, 2, 2)
    # the convolution alone, its output the model's, aborts: another failure, rejected and said so
    assert any(w.startswith("the root alone") and "SIGABRT" in w for w in d["rejected_why"])
    assert d["rejected"] == len(d["rejected_why"]) >= 1
    shown = io.StringIO()
    render_reduce_terminal(d, shown)
    assert "rejected: the root alone (1 operator(s)): " in shown.getvalue() and "10 -> 2" in shown.getvalue()
    why = {k["name"]: k["why"] for k in d["kept"]}
    assert why["c2.Convolution"].startswith("the root") and "fails another way" in why["RELU[1]"]
    # every run is counted (one run.json each), within the target; the part is fed the reference's Pooling[0]
    assert d["runs"] == len(list((r.dir / "work").rglob("run.json"))) <= target_runs(10)
    assert sorted(p.name for p in (r.dir / "inputs").iterdir()) == ["in18_Pooling_0.npy"]
    assert list(d["expected"]) == ["RELU[1]"]
    # a repro folder: replay under the faulty binary reproduces it bit for bit (its root is not an output)
    proc = cli("replay", r.dir, "--lar", lar)
    assert proc.returncode == 1 and proc.stdout.startswith("reproduced:"), proc.stdout + proc.stderr


def test_out_of_runs_hands_over_the_smallest_failing_part_so_far_and_says_so(pair, tmp_path):
    adir, lar = pair
    r = reduce(adir, out=tmp_path / "r", lar=str(lar), max_runs=3)
    d = r.data
    assert d["runs"] <= 3 + 1 and d["stopped"] and "--max-runs" in d["stopped"] and d["stopped"] in d["notes"]
    # what is handed over still fails the same way: not minimal, never another failure
    assert r.exit_code == 1 and d["outcome"]["verdict"] == "same"
    assert 2 <= d["operators_after"] <= d["operators_before"]
    assert "c2.Convolution" in [k["name"] for k in d["kept"]]


def test_a_finding_that_does_not_reproduce_stops_and_says_why(pair, tmp_path):
    adir, lar = pair
    proc = cli("reduce", adir, "--out", tmp_path / "r", "-q")  # the bundled load_and_run has no such fault
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("Error: ") and "\n" not in line
    assert "does not reproduce" in line and "c2.Convolution" in line and str(lar) in line and "bundled" in line
    # the whole model ran once; nothing reduced, nothing handed over
    assert len(list((tmp_path / "r").rglob("run.json"))) == 1 and not (tmp_path / "r" / "model.mge").exists()


def _edited(adir: Path, tmp_path: Path, edit) -> Path:
    """A copy of the analysis folder (moved: its report's paths name the old one) with report.json edited."""
    copy = tmp_path / "copy"
    shutil.copytree(adir, copy)
    rep = json.loads((copy / "report.json").read_text())
    edit(rep)
    (copy / "report.json").write_text(json.dumps(rep))
    return copy


@pytest.mark.parametrize("edit, words", [
    (lambda r: r["runs"][1]["argv"].extend(["--rewritten-model", "/tmp/elsewhere.mge"]), "read and write no file"),
    (lambda r: r["runs"][0].update(dump_dir="/etc"), "not a folder inside the analysis folder"),
    (lambda r: r["runs"][1].update(config="sh -c id"), "is not one of"),
    (lambda r: r.update(command="compare"), "reduce starts from an analysis of"),
    # a path the report names is verified by the sha256 its runs recorded before anything reads it
    (lambda r: r.update(model="/etc/passwd"), "/etc/passwd is not the model the analysis ran"),
])
def test_the_analysis_folder_is_data_nothing_of_it_runs(pair, tmp_path, edit, words):
    copy = _edited(pair[0], tmp_path, edit)
    with pytest.raises(UsageError, match=words):
        reduce(copy, out=tmp_path / "r", lar=str(pair[1]))
    assert not (tmp_path / "r").exists()


def test_a_full_disk_under_out_is_said_with_exit_2(pair, tmp_path):
    """--out on a tmpfs of 400 KiB: the whole model's run cannot write its dump. The disk is
    said full (exit 2), never a finding that does not reproduce (or exit 3 with no reason)."""
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(full)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        proc = cli("reduce", pair[0], "--out", full / "r", "--lar", pair[1], "-q")
    finally:
        subprocess.run(["umount", "-l", str(full)], capture_output=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert "Traceback" not in proc.stderr and f"the disk of {full / 'r'}" in line and "is full" in line
    assert "does not reproduce" not in line


def test_a_moved_analysis_folder_and_bad_choices_are_told(pair, tmp_path):
    from lar_prec.workflows.reduce.finding import read_finding

    copy = _edited(pair[0], tmp_path, lambda r: None)
    f = read_finding(copy)  # its dumps found where they are now
    assert f.ref_dump == (copy / "naive" / "dump").resolve() and f.root_name == "c2.Convolution"
    assert f.klass == "wrong_value" and f.bar == pytest.approx(max(f.floor, f.err / 2))
    with pytest.raises(UsageError, match="not a root of"):
        read_finding(copy, root="Softmax")
    with pytest.raises(UsageError, match="not of a sweep"):
        read_finding(copy, option="ioc16")


@pytest.mark.parametrize("case, option, replay", [("cnn", "ioc16", False), ("resnet", "nhwcd4", True)])
def test_this_megengines_own_kernel_bugs_reduce_where_the_cpu_has_them(manifest, tmp_path, case, option, replay):
    c = manifest[case]
    s = sweep(c.model, c.input_specs(), options=[option], out=tmp_path / "s", local=False, html=False, speed_runs=0)
    opt = s.result.options[0]
    if opt.status != "runs" or opt.verdict != "diverges":
        pytest.skip(f"{option} on {case}: {opt.status}, {opt.verdict or opt.reason}: no kernel bug of this CPU to "
                    "reduce (the CPU decides which kernels run)")
    proc = cli("reduce", s.dir, "--option", option, "--out", tmp_path / "r", "--json", "-", "-q")
    assert proc.returncode == 1, proc.stderr
    d = json.loads(proc.stdout)
    # every configuration runs on the CPU (--cpu, issue 52), then the option's flags
    assert d["finding"]["option"] == option and d["finding"]["test"]["flags"] == ["--cpu", *opt.flags]
    assert d["finding"]["root"]["name"] in [k["name"] for k in d["kept"]]
    assert d["operators_after"] <= 10 and d["operators_after"] < d["operators_before"]
    assert d["runs"] <= target_runs(d["operators_before"])
    if replay:  # the option dumps a packed layout: replay brings it back to compare
        proc = cli("replay", tmp_path / "r")
        assert proc.returncode == 1 and proc.stdout.startswith("reproduced"), proc.stdout + proc.stderr


def test_two_runs_of_one_failure_end_with_one_signature():
    from lar_prec.workflows.reduce.finding import ending

    def stderr(model: str, stamp: str, addr: str) -> str:  # MegEngine's own lines, as it writes them
        return ("info: + Failed to load CUDA driver library, MegEngine works under CPU mode now. +\n"
                "debug: failed to load cuda func: cuDeviceGetCount\n"
                f"\x1b[33m26 {stamp}[mgb] \x1b[0m\x1b[1;4;31mERR error while applying optimization pass "
                f"convert_f32_to_f16: assertion `x' failed at /home/code/dnn/src/common/reduce.cpp:74\x1b[0m\n"
                f"/usr/lib/libmegengine_shared.so(_ZN3mgb13MegBrainErrorC1ERKSs+0x4a) [{addr}]\n"
                f"load_and_run: error: cannot rewrite {model} for io16xc32: assertion `x' failed\n")

    a = ending("failed", None, 1, stderr("/a/model.mge", "15:39:37", "0x7f66db84686a"))
    b = ending("failed", None, 1, stderr("/b/part003/reduced.mge", "16:02:11", "0x7fbb95c13880"))
    assert a == b == ("crash", "fatal: ERR error while applying optimization pass convert_f32_to_f16: assertion `x' "
                               "failed at <path>:74")
    # a dead MegEngine that exits and one that parks after the same line: one failure, two classes
    assert ending("crashed", "SIGABRT", -6, "bad err=45 in Xbyak::Error\nterminate called\n")[1] == \
        ending("stalled", "SIGTERM", -15, "bad err=45 in Xbyak::Error\n")[1] == "fatal: bad err=45 in Xbyak::Error"
    assert ending("crashed", "SIGSEGV", -11, "") == ("crash", "ended: killed by SIGSEGV")
