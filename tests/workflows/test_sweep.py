"""lar-prec sweep end to end on real runs of the cases, and its analysis on real rewritten dumps.

Assertions are on behaviour that holds on any x86 CPU: options that change nothing in the
measurements (weight and fuse preprocessing, const shape, record level 1) come out ok; the fp16
rewrite's max pooling fault (reference/graph-options.md) is found and rooted; a fault injected
into a rewritten graph's dump is rooted at that var; a binary that hangs or crashes under one
option leaves the other options reported.
"""
from __future__ import annotations

import json
import sys
import time
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from click.testing import CliRunner

from proc_helpers import ctrl_c
from conftest import ROOT
from lar_prec.cli import cli
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import read_binary_dump, write_binary_dump
from lar_prec.report.records import SCHEMA
from lar_prec.workflows.sweep.options import OPTIONS
from lar_prec.workflows.sweep.options import parse_options
from lar_prec.workflows.sweep.analysis import cross_graph, same_graph

FAKE_LAR = ROOT / "tests" / "fake_lar.py"
NO_CHANGE = ["weight-preprocess", "fuse-preprocess", "const-shape", "record-comp-seq"]


def invoke(args):
    return CliRunner(mix_stderr=False).invoke(cli, args, catch_exceptions=False)


def case_args(case) -> list:
    args = [str(case.model)]
    for spec in case.input_specs():
        args += ["--input", spec]
    return args


def sweep_json(tmp_path: Path, case, options, *more, expect: Optional[int]):
    out = tmp_path / "r.json"
    res = invoke(["sweep", *case_args(case), "--options", ",".join(options), "--out", str(tmp_path / "a"),
                  "--json", str(out), "--html", str(tmp_path / "r.html"), "-q", "--speed-runs", "0", *more])
    assert res.exit_code == expect if expect is not None else res.exit_code in (0, 1), res.stdout + res.stderr
    d = json.loads(out.read_text())
    assert res.exit_code == d["exit_code"]
    assert d["schema"] == SCHEMA and d["command"] == "sweep"
    assert {"threshold", "vars", "roots", "runs"} <= set(d)
    ids = {v["id"]: v for v in d["vars"]}
    for r in d["roots"]:  # design.md: a root is one of the vars, not ok
        assert ids[r["id"]]["status"] != "ok" and ids[r["id"]]["name"] == r["name"]
    return d, res


def by_option(d) -> dict:
    return {o["option"]: o for o in d["options"]}


@pytest.mark.megengine
def test_sweep_cnn_finds_the_fp16_pooling_fault_and_passes_what_changes_nothing(manifest, tmp_path):
    d, res = sweep_json(tmp_path, manifest["cnn"], NO_CHANGE + ["ioc16", "nhwcd4"], "-j", "2", expect=1)
    opts = by_option(d)
    for name in NO_CHANGE + ["nhwcd4"]:
        o = opts[name]
        assert o["status"] == "runs" and o["verdict"] == "ok", o
        assert o["vars_paired"] >= o["vars_total"] - 2 > 0  # a layout may leave conv outputs to a relayout op
        assert o["output_err"] is not None and o["output_err"] < 1e-4
    # the default x86 fp16 max pooling is wrong, the naive one is right: a kernel, rooted at the pooling
    o = opts["ioc16"]
    assert o["verdict"] == "diverges" and o["root"]["name"] == "Pooling[0]"
    # its wrong values are sometimes NaN/Inf (null in JSON, flagged nonfinite), else errors near 1
    assert o["root"]["opr_type"] == "PoolingForward"
    assert o["root"]["nonfinite"] or o["root"]["max_err"] > 0.5
    assert "kernel wrong under this option" in o["cause"]
    assert o["naive_vs_default_err"] is None or o["naive_vs_default_err"] > 0.5
    assert o["naive_run_dir"] and Path(o["naive_run_dir"], "run.json").is_file()
    # worst first; the root is in the report's roots, named by option
    assert d["options"][0]["option"] == "ioc16"
    assert [(r["name"], r["option"]) for r in d["roots"]] == [("Pooling[0]", "ioc16")]
    # the option-by-variable view: every var has every option that ran
    pool = next(v for v in d["vars"] if v["name"] == "Pooling[0]")
    assert pool["status"] == "divergent" and set(pool["options"]) == set(NO_CHANGE + ["ioc16", "nhwcd4"])
    assert pool["options"]["weight-preprocess"] < 1e-4
    assert "ioc16" in pool["options_nonfinite"] or pool["options"]["ioc16"] > 1e-2  # wrong values, or Inf
    # runs: reference, the plain default run, six options, the naive run under ioc16 (the level of its
    # tolerance, and what tells kernel from math) and ioc16 once more (its wrong value: the same bits?),
    # each with its run.json
    assert sorted(r["label"] for r in d["runs"]) == sorted(["reference", "default", *NO_CHANGE, "ioc16", "nhwcd4",
                                                            "ioc16-naive", "ioc16-again"])
    n = o["nondeterminism"]  # whether this CPU's pooling repeats its wrong value: either, said in words
    assert n["told"] and n["same_bits"] != n["differs"] and n["compared"] >= 10, n
    assert n["words"].startswith("nondeterministic under ioc16: " if n["differs"] else "deterministic under ioc16: ")
    assert all(x["nondeterminism"] is None for x in d["options"] if x["option"] != "ioc16")
    rewritten = json.loads(Path(o["run_dir"], "run.json").read_text())["rewritten_model"]
    assert len(rewritten["sha256"]) == 64 and Path(rewritten["path"]).is_file()
    assert "ioc16" in res.stdout and "diverges" in res.stdout and "Pooling[0]" in res.stdout
    page = (tmp_path / "r.html").read_text()
    assert "Option by variable" in page and "Pooling[0]" in page
    # local error (issue 14): measured under every option that ran, no local root under the
    # options that keep float32; ioc16's local root is the pooling its naive run blames
    assert d["local"]["measured"] and "[roots by local error]" in " ".join(res.stdout.split())
    for name in NO_CHANGE:
        loc = opts[name]["local"]
        assert loc["measured"] and loc["roots"] == [] and loc["not_measured"] == [] and loc["n_measured"] >= 10, loc
        assert opts[name]["root_rule"] == "local"
    loc = opts["nhwcd4"]["local"]  # its layerwise run may fail (fallback conv under NHWCD4): a note, the row stays
    assert (loc["measured"] and loc["roots"] == []) or "could not be measured" in loc["why"], loc
    loc = o["local"]
    assert loc["measured"] and loc["compute_dtype"] == "float16" and o["root_rule"] == "local"
    assert loc["roots"][0]["name"] == o["kernel_root"] == "Pooling[0]"
    assert loc["roots"][0]["nonfinite"] or loc["roots"][0]["margin"] > 10
    assert d["roots"][0]["rule"] == "local" and d["roots"][0]["floor"] > 0
    assert o["dump_root"]["name"] == "Pooling[0]"
    assert "local root (margin)" in page  # the drawn sentence: tests/report/test_report_html.py


@pytest.mark.megengine
def test_sweep_resnet_options_that_change_nothing_are_ok(manifest, tmp_path):
    d, _ = sweep_json(tmp_path, manifest["resnet"], NO_CHANGE + ["fuse-conv-bias-nonlinearity"], "-j", "2",
                      expect=0)
    for o in d["options"]:
        assert o["status"] == "runs" and o["verdict"] == "ok" and o["root"] is None, o
        assert o["vars_paired"] > 0.5 * o["vars_total"]
    assert d["roots"] == [] and all(v["status"] == "ok" for v in d["vars"])
    assert d["timing"]["run_seconds"] > 0 and d["timing"]["analysis_seconds"] >= 0
    # local error under each option: every operator measured, none over its floor (no false alarm)
    for o in d["options"]:
        loc = o["local"]
        assert loc["measured"] and loc["roots"] == [] and loc["not_measured"] == [], loc
        assert loc["n_measured"] == len(d["vars"]) and o["root_rule"] == "local"
    assert all(set(v["local"]) == {o["option"] for o in d["options"]} for v in d["vars"])
    assert d["timing"]["local_seconds"] > 0


@pytest.mark.megengine
@pytest.mark.slow
@pytest.mark.parametrize("case", ["attention", "multi_input", "fp16", "int_ops", "quantized"])
def test_options_that_change_nothing_are_ok_on_every_other_case(manifest, tmp_path, case):
    d, _ = sweep_json(tmp_path, manifest[case], NO_CHANGE, "-j", "2", expect=0)
    for o in d["options"]:
        assert o["status"] == "runs" and o["verdict"] == "ok" and o["vars_paired"] == o["vars_total"] > 0, o


def test_bench_sweep_prints_the_ratio(manifest, tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sweep.py"), "--cases", "cnn", "--options",
                           "weight-preprocess", "--out", str(tmp_path / "b.md")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert "of the runs" in proc.stdout and ("PASS" in proc.stdout or "FAIL" in proc.stdout)
    assert "| cnn |" in (tmp_path / "b.md").read_text()


@pytest.mark.megengine
def test_sweep_skips_layouts_on_a_model_without_convolution(manifest, tmp_path):
    d, res = sweep_json(tmp_path, manifest["mlp"], ["nhwcd4", "weight-preprocess"], expect=0)
    o = by_option(d)["nhwcd4"]
    assert o["status"] == "skipped" and "no convolution" in o["reason"] and o["run_dir"] is None
    assert by_option(d)["weight-preprocess"]["verdict"] == "ok"
    assert [r["label"] for r in d["runs"]] == ["reference", "default", "weight-preprocess"]  # nothing run for a skip


def _perturb(src: Path, dst: Path, name: str, rel: float) -> int:
    """Copy a dump folder and scale the var named ``name`` (only it) by (1 + rel); its id."""
    shutil.copytree(src, dst)
    folder = DumpFolder(dst)
    vid = [v for v in folder.ids if folder.var_info(v).name == name][-1]
    path = folder.paths()[vid]
    d = read_binary_dump(path)
    write_binary_dump(path, np.array(d.array(), dtype=np.float32) * np.float32(1 + rel), d.title, dtype=d.dtype.code)
    return vid


@pytest.mark.megengine
@pytest.mark.parametrize("flag,fmt", [("--enable-nhwcd4", "NHWCD4"), ("--enable-nchw44", "NCHW44"),
                                      ("--enable-fuse-conv-bias-nonlinearity", None)])
def test_fault_in_a_rewritten_graphs_dump_is_rooted_at_that_var(lar_dump, tmp_path, flag, fmt):
    ref = lar_dump("cnn", "naive")
    rewritten = lar_dump("cnn", "default", flags=(flag,))
    clean = cross_graph(ref, rewritten, 1e-4, fmt=fmt)
    assert not clean.diverges and clean.root is None
    assert all(e.max_err is not None for e in clean.errs), [e.note for e in clean.errs]
    vid = _perturb(rewritten, tmp_path / "faulty", "RELU[1]", 1e-2)  # in the option's layout
    g = cross_graph(ref, tmp_path / "faulty", 1e-4, fmt=fmt)
    assert g.diverges and g.root is not None
    assert (g.root.name, g.root.b) == ("RELU[1]", vid) and 5e-3 < g.root.max_err < 2e-2
    # the vars before it stay within tolerance, by value
    before = [e for e in g.errs if e.name in ("RELU[0]", "Pooling[0]")]
    assert before and all(e.max_err < 1e-4 for e in before)
    # the same fault against an unperturbed run of the same graph: rooted by id
    s = same_graph(rewritten, tmp_path / "faulty", 1e-4)
    assert s.root is not None and s.root.b == vid and s.n_paired == s.n_computed_a


@pytest.mark.megengine
def test_stand_in_that_hangs_or_segfaults_under_one_option_leaves_the_others_reported(
        manifest, lar_dump, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP", str(lar_dump("cnn", "default")))
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP_NAIVE", str(lar_dump("cnn", "naive")))
    monkeypatch.setenv("FAKE_LAR_MODE_IF_FLAG", "--enable-nchw88=sleep,--enable-nhwcd4=segv,--const-shape=exit1")
    d, res = sweep_json(tmp_path, manifest["cnn"], ["nchw88", "nhwcd4", "const-shape", "weight-preprocess"],
                        "--lar", str(FAKE_LAR), "--timeout", "4", "-j", "2", expect=1)
    opts = by_option(d)
    assert opts["nchw88"]["status"] == "hung" and "did not finish within 4 s" in opts["nchw88"]["reason"]
    assert opts["nhwcd4"]["status"] == "crashed" and "SIGSEGV" in opts["nhwcd4"]["reason"]
    assert opts["const-shape"]["status"] == "load_failed"
    assert opts["weight-preprocess"]["status"] == "runs" and opts["weight-preprocess"]["verdict"] == "ok"
    assert [o["option"] for o in d["options"]][-1] == "weight-preprocess"  # worst first
    for name in ("nchw88", "nhwcd4", "const-shape"):
        run = json.loads(Path(opts[name]["run_dir"], "run.json").read_text())
        assert run["status"] in ("timeout", "crashed", "failed")
    assert "hung (timed out)" in res.stdout and "crashed (signal)" in res.stdout
    # the stand-in replays canned dumps, so it cannot run the layerwise model: that option's local
    # error is not measured, says why, and its verdict stays the dumps'
    wp = opts["weight-preprocess"]
    assert wp["local"]["measured"] is False and "could not be measured" in wp["local"]["why"]
    assert wp["root_rule"] == "dump"


@pytest.mark.megengine
def test_an_option_whose_run_stalls_is_seen_in_seconds(manifest, lar_dump, tmp_path, monkeypatch):
    """Issue 21 §2: under one option the binary prints an Xbyak error and then waits with no CPU
    (as MegEngine does on some CPUs under nchw88): `stalled` with that line, in seconds, while a
    timeout of 300 s would have held the whole sweep; the other option is reported as usual."""
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP", str(lar_dump("cnn", "default")))
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP_NAIVE", str(lar_dump("cnn", "naive")))
    monkeypatch.setenv("FAKE_LAR_MODE_IF_FLAG", "--enable-nchw88=stall")
    monkeypatch.setenv("LAR_PREC_STALL_AFTER", "2")
    t0 = time.monotonic()
    d, res = sweep_json(tmp_path, manifest["cnn"], ["nchw88", "weight-preprocess"],
                        "--lar", str(FAKE_LAR), "--timeout", "300", "-j", "2", expect=1)
    assert time.monotonic() - t0 < 120
    opts = by_option(d)
    assert opts["nchw88"]["status"] == "stalled", opts["nchw88"]
    assert "stalled after: bad err=45 in Xbyak::Error" in opts["nchw88"]["reason"]
    assert json.loads(Path(opts["nchw88"]["run_dir"], "run.json").read_text())["status"] == "stalled"
    assert opts["weight-preprocess"]["status"] == "runs"
    assert "stalled (no CPU)" in res.stdout


@pytest.mark.megengine
def test_reference_failing_is_exit_3(manifest, lar_dump, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LAR_MODE", "exit1")
    res = invoke(["sweep", *case_args(manifest["cnn"]), "--options", "weight-preprocess", "--lar", str(FAKE_LAR),
                  "--out", str(tmp_path / "a"), "-q"])
    assert res.exit_code == 3 and res.stderr.startswith("Error: ") and "reference" in res.stderr


def test_options_are_checked_before_anything_runs(tmp_path):
    assert [o.name for o in parse_options("enable-nhwcd4, ioc16,nhwcd4")] == ["nhwcd4", "ioc16"]
    assert set(parse_options(None)) <= set(OPTIONS.values())
    res = invoke(["sweep", str(tmp_path / "m.mge"), "--options", "nchw99", "--out", str(tmp_path / "a")])
    assert res.exit_code == 2 and "unknown sweep option 'nchw99'" in res.stderr
    assert not (tmp_path / "a").exists()


@pytest.mark.megengine
def test_naive_vs_default_takes_load_and_run_options_directly(manifest, tmp_path):
    out = tmp_path / "r.json"
    res = invoke(["naive-vs-default", *case_args(manifest["cnn"]), "--enable-fuse-conv-bias-nonlinearity", "-j", "2",
                  "--out", str(tmp_path / "a"), "--json", str(out), "-q"])
    assert res.exit_code in (0, 1), res.stderr
    d = json.loads(out.read_text())
    assert all(v["status"] != "missing" for v in d["vars"])  # same rewritten graph: ids pair
    assert any(v["opr_type"] == "ConvBiasForward" for v in d["vars"])  # the fused graph really ran
    hashes = set()
    for r in d["runs"]:
        assert r["argv"][-1] == "--enable-fuse-conv-bias-nonlinearity"
        hashes.add(json.loads(Path(r["dir"], "run.json").read_text())["rewritten_model"]["sha256"])
    assert len(hashes) == 1
    res = invoke(["naive-vs-default", *case_args(manifest["cnn"]), "--enable-nhwcd5", "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--enable-nhwcd5" in res.stderr and not (tmp_path / "b").exists()


@pytest.mark.megengine
def test_ctrl_c_during_a_sweep_is_130_and_leaves_run_folders_consistent(manifest, lar_dump, tmp_path):
    import os
    import sys

    env = {**os.environ, "LAR_PREC_STALL_AFTER": "0",  # the stand-in sleeps (no CPU): no CPU watch
            "FAKE_LAR_SOURCE_DUMP": str(lar_dump("cnn", "default")),
           "FAKE_LAR_SOURCE_DUMP_NAIVE": str(lar_dump("cnn", "naive")),
           "FAKE_LAR_MODE_IF_FLAG": "--enable-nhwcd4=sleep", "FAKE_LAR_CHILD_PID": str(tmp_path / "child.pid"),
           "PYTHONPATH": str(ROOT)}
    out = tmp_path / "a"
    argv = [sys.executable, "-m", "lar_prec", "sweep", *case_args(manifest["cnn"]), "--options",
            "nhwcd4,weight-preprocess", "-j", "2", "--lar", str(FAKE_LAR), "--out", str(out), "-q"]
    rc, err, _ = ctrl_c(argv, env, tmp_path / "child.pid")  # SIGINT to the group, as a terminal sends it
    assert rc == 130, err
    assert "interrupted" in err and str(out) in err
    runs = {p.parent.name: json.loads(p.read_text())["status"] for p in out.glob("*/run.json")}
    assert runs["nhwcd4"] == "interrupted" and runs["reference"] == "ok", runs
    assert "running" not in runs.values()


def _sweep_stand_in(tmp_path, lar_dump, manifest, env: dict) -> "tuple[list, dict]":
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_LAR_SOURCE_DUMP": str(lar_dump("cnn", "default")), **env}
    return [sys.executable, "-m", "lar_prec", "sweep", *case_args(manifest["cnn"]), "--options",
            "nhwcd4,weight-preprocess", "--lar", str(FAKE_LAR), "--out", str(tmp_path / "a"), "--no-local"], env


@pytest.mark.megengine
def test_sweep_says_each_finished_step_in_a_log(manifest, lar_dump, tmp_path):
    """Issue 41 #8: `sweep MODEL --input ... 2> ci.log` printed nothing for minutes: now one
    line per finished step, as mixed prints (the reference, then each option and its verdict)."""
    import subprocess

    argv, env = _sweep_stand_in(tmp_path, lar_dump, manifest, {})
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("lar-prec sweep: steps ")]
    assert lines[0].startswith("lar-prec sweep: steps 1/4: reference (naive kernels, plain graph) ok in "), lines
    assert lines[1:] == ["lar-prec sweep: steps 2/4: default: runs, ok",  # one run at a time: in order
                         "lar-prec sweep: steps 3/4: nhwcd4: runs, ok",
                         "lar-prec sweep: steps 4/4: weight-preprocess: runs, ok"], lines


@pytest.mark.megengine
def test_sweep_bar_names_the_option_under_way_in_a_terminal(manifest, lar_dump, tmp_path):
    """Issue 41 #8: on a terminal the sweep's bar said only "load_and_run runs": it names the
    step under way (here nhwcd4, whose stand-in run keeps the CPU busy for 2 s)."""
    import os
    import pty
    import subprocess
    import threading

    argv, env = _sweep_stand_in(tmp_path, lar_dump, manifest, {"FAKE_LAR_MODE_IF_FLAG": "--enable-nhwcd4=busy",
                                                                 "FAKE_LAR_BUSY_SECONDS": "2", "COLUMNS": "120"})
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal closed with the process
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert proc.wait(timeout=300) == 0
    reader.join(timeout=10)
    os.close(master)
    assert b"steps: nhwcd4" in seen, bytes(seen[-2000:])


def test_every_spelling_of_an_option_names_it():
    """Issue 21 §3: `--options enable_ioc16` was refused while `--enable-ioc16` was accepted."""
    from lar_prec.workflows.sweep.options import parse_options

    for spelling in ("ioc16", "enable_ioc16", "enable-ioc16", "--enable-ioc16", "--enable_ioc16"):
        assert [o.name for o in parse_options(spelling)] == ["ioc16"], spelling
    assert [o.name for o in parse_options("--weight_preprocess,fuse_preprocess,enable-fuse-preprocess")] == [
        "weight-preprocess", "fuse-preprocess"]


@pytest.mark.megengine
def test_load_failures_bad_dumps_and_a_missing_output_are_findings_and_the_sweep_reports_the_rest(
        manifest, lar_dump, tmp_path, monkeypatch):
    """Issue 20 #5 and #8: an option that does not load, one whose dump is unreadable and one
    whose run never dumped the model's output are each reported (exit 1), in words, and the
    other options still are; never "no option diverges" with exit 0."""
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP", str(lar_dump("cnn", "default")))
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP_NAIVE", str(lar_dump("cnn", "naive")))
    monkeypatch.setenv("FAKE_LAR_MODE_IF_FLAG", "--const-shape=exit1,--enable-nhwcd4=bad_dump,--record-comp-seq=drop_output")
    d, res = sweep_json(tmp_path, manifest["cnn"], ["const-shape", "nhwcd4", "record-comp-seq", "weight-preprocess"],
                        "--lar", str(FAKE_LAR), "--no-local", expect=1)
    opts = by_option(d)
    assert opts["const-shape"]["status"] == "load_failed"
    assert opts["const-shape"]["reason"].startswith("the model did not load under this option")
    assert "all of it in run.json" in opts["const-shape"]["reason"]
    assert opts["nhwcd4"]["status"] == "bad_dump" and "cannot be read" in opts["nhwcd4"]["reason"]
    assert opts["record-comp-seq"]["verdict"] == "diverges"
    assert "output was not dumped" in opts["record-comp-seq"]["reason"]
    assert opts["weight-preprocess"]["status"] == "runs" and opts["weight-preprocess"]["verdict"] == "ok"
    assert "const-shape load failed (the model did not load" in d["verdict"]
    assert "nhwcd4 dump unreadable" in d["verdict"] and "no option diverges" not in d["verdict"]


#: the bundled load_and_run, but under --record-comp-seq the user's model loses its last dump file (its output)
DROP_OUTPUT_LAR = """import os, subprocess, sys
argv = sys.argv[1:]
rc = subprocess.call([sys.executable, "-m", "lar_prec.lar", *argv], env={**os.environ, "PYTHONPATH": ROOT})
if rc == 0 and "--record-comp-seq" in argv and "--bin-io-dump" in argv and os.path.realpath(argv[0]) == os.path.realpath(MODEL):
    folder = argv[argv.index("--bin-io-dump") + 1]
    os.remove(os.path.join(folder, sorted(n for n in os.listdir(folder) if not n.startswith("."))[-1]))
sys.exit(rc)
"""


@pytest.mark.megengine
def test_an_output_never_dumped_is_not_a_pass_when_local_error_is_measured(manifest, tmp_path):
    """Issue 41 #2: `sweep MODEL --options record-comp-seq,weight-preprocess --lar lar.py`, whose run
    under record-comp-seq never dumped the model's output: every operator's local error within
    its floor turned that option `ok` and the sweep said "no option diverges", exit 0 (the
    reason column said the output was missing). A comparison that cannot see the output is not
    a pass: exit 1, and the verdict says why."""
    case = manifest["cnn"]
    lar = tmp_path / "lar.py"
    lar.write_text(f"#!{sys.executable}\nROOT, MODEL = {str(ROOT)!r}, {str(case.model)!r}\n{DROP_OUTPUT_LAR}")
    lar.chmod(0o755)
    d, res = sweep_json(tmp_path, case, ["record-comp-seq", "weight-preprocess"], "--lar", str(lar), expect=1)
    o = by_option(d)["record-comp-seq"]
    assert o["local"]["measured"] and o["verdict"] == "diverges" and o["output_unseen"] is True, o
    assert d["verdict"].startswith("1 of 2 option(s) that ran diverge beyond the default run; worst: record-comp-seq "
                                   "(the model's output was not dumped under this option"), d["verdict"]
    assert by_option(d)["weight-preprocess"]["verdict"] == "ok"


@pytest.mark.megengine
def test_a_float16_option_on_a_quantized_model_is_skipped_with_why(manifest, tmp_path):
    """Issue 20 #5: ioc16 on an int8 model failed to load with a MegDNN assertion and the sweep
    said nothing; it does not apply there: skipped, in words."""
    d, _ = sweep_json(tmp_path, manifest["quantized"], ["ioc16", "weight-preprocess"], "--no-local", expect=0)
    opts = by_option(d)
    assert opts["ioc16"]["status"] == "skipped"
    assert "does not apply to a quantized model" in opts["ioc16"]["reason"]


@pytest.mark.megengine
def test_a_load_failure_alone_is_not_an_all_clear(manifest, lar_dump, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP", str(lar_dump("cnn", "default")))
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP_NAIVE", str(lar_dump("cnn", "naive")))
    monkeypatch.setenv("FAKE_LAR_MODE_IF_FLAG", "--const-shape=exit1")
    d, _ = sweep_json(tmp_path, manifest["cnn"], ["const-shape", "weight-preprocess"], "--lar", str(FAKE_LAR),
                      "--no-local", expect=1)
    assert d["verdict"].startswith("no option that ran diverges beyond the default run (1 ran), but 1 did not run through")
