"""The runner: configurations, load_and_run resolution, inputs, run folders, failures, `lar-prec run`.

External load_and_run binaries are played by ``tests/fake_lar.py`` behind a shell wrapper
(fixtures in runner_fixtures.py); real runs go through the bundled load_and_run on the built
cases. Bad input, full disks, races and Ctrl-C: test_runner_errors.py.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lar_prec import runner
from lar_prec.report.records import run_from_result
from lar_prec.cli import cli
from lar_prec.errors import LoadAndRunNotFound, RunError, RunTimeout, UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.textdump import read_text_dump
from lar_prec.run.dirs import REPLACED_NAME, finish_analysis_dir
from proc_helpers import wait_gone
from runner_fixtures import clean_env, fake_lar, model_file, prepared  # noqa: F401  (fixtures)


# ----------------------------------------------------------------------------- configurations


def test_configs():
    assert set(runner.CONFIGS) == {"naive", "default", "reproducible", "fast-run"}
    naive = runner.get_config("naive")
    assert naive.env_dict() == {"MGB_USE_MEGDNN_DBG": "2"} and "--cpu" in naive.flags
    # a debug level inherited from the shell must not turn "default" into naive
    for name in ("default", "reproducible", "fast-run"):
        assert runner.get_config(name).env_dict() == {"MGB_USE_MEGDNN_DBG": None}
    # every configuration on the CPU, as the naive reference (issue 52: a real binary runs an MDL
    # model where the model says, the GPU of a CUDA build)
    assert runner.get_config("default").flags == ("--cpu",)
    assert runner.get_config("fast_run").flags == ("--cpu", "--fast-run")
    assert runner.get_config("reproducible").flags == ("--cpu", "--reproducible")
    with pytest.raises(UsageError, match="unknown configuration"):
        runner.get_config("fastest")
    extra = naive.with_extra(["--multithread", "2"], {"MGB_DUMP_INPUT": "1"})
    assert extra.flags[-2:] == ("--multithread", "2")
    assert extra.env_dict() == {"MGB_USE_MEGDNN_DBG": "2", "MGB_DUMP_INPUT": "1"}


def test_build_argv_is_the_real_binary_syntax(model_file, tmp_path):
    lar = runner.LoadAndRun("/opt/lar", ("/opt/lar",), "external")
    argv = runner.build_argv(lar, model_file, "data:x.npy", runner.get_config("naive"), dump_dir=tmp_path,
                             extra_flags=["--multithread", "2"])
    assert argv == ["/opt/lar", str(model_file), "--input", "data:x.npy", "--bin-io-dump", str(tmp_path),
                    "--iter", "1", "--warmup-iter", "0", "--cpu", "--multithread", "2"]
    bundled = runner.bundled_load_and_run()
    argv = runner.build_argv(bundled, model_file, "", runner.get_config("default"), text_dump=tmp_path / "t.txt")
    assert argv[:3] == [sys.executable, "-m", "lar_prec.lar"] and argv[4:6] == ["--io-dump", str(tmp_path / "t.txt")]
    for bad in ("--bin_io_dump=d", "--io-dump", "-input", "--bin-out-dump"):
        with pytest.raises(UsageError, match="conflicts"):
            runner.build_argv(lar, model_file, "", runner.get_config("default"), extra_flags=[bad])


def test_env_and_flag_helpers():
    assert runner.parse_env_assignments(["A=1", "B=", "-C"]) == {"A": "1", "B": "", "C": None}
    with pytest.raises(UsageError, match="NAME=VALUE"):
        runner.parse_env_assignments(["1A=x"])
    assert runner.split_lar_args(["--multithread 2", "--verbose"]) == ("--multithread", "2", "--verbose")


# ----------------------------------------------------------------------------- which load_and_run


def test_resolve_precedence(fake_lar, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert runner.resolve_load_and_run(None).is_bundled
    monkeypatch.setenv("PATH", str(fake_lar.path.parent))
    found = runner.resolve_load_and_run(None)
    assert (found.kind, found.path, found.source) == ("external", str(fake_lar.path), "PATH")
    other = tmp_path / "other_lar"
    other.write_text("#!/bin/sh\nexit 0\n")
    other.chmod(0o755)
    monkeypatch.setenv("LAR_PREC_LOAD_AND_RUN", str(other))
    assert runner.resolve_load_and_run(None).path == str(other)
    assert runner.resolve_load_and_run(str(fake_lar.path)).path == str(fake_lar.path)  # --lar wins
    assert runner.resolve_load_and_run("bundled").is_bundled
    monkeypatch.setenv("LAR_PREC_LOAD_AND_RUN", "bundled")
    assert runner.resolve_load_and_run(None).is_bundled


def test_resolve_refuses_missing_or_not_executable(tmp_path, monkeypatch):
    with pytest.raises(LoadAndRunNotFound, match="does not exist") as exc:
        runner.resolve_load_and_run(str(tmp_path / "nope"))
    assert exc.value.exit_code == 2
    plain = tmp_path / "plain"
    plain.write_text("x")
    with pytest.raises(LoadAndRunNotFound, match="not executable"):
        runner.resolve_load_and_run(str(plain))
    with pytest.raises(LoadAndRunNotFound, match="folder"):
        runner.resolve_load_and_run(str(tmp_path))
    monkeypatch.setenv("LAR_PREC_LOAD_AND_RUN", str(tmp_path / "gone"))
    with pytest.raises(LoadAndRunNotFound, match=r"\$LAR_PREC_LOAD_AND_RUN"):
        runner.resolve_load_and_run(None)


# ----------------------------------------------------------------------------- folders and inputs


def test_run_dirs_are_never_reused(tmp_path):
    names = [runner.new_run_dir(tmp_path, "naive").name for _ in range(3)]
    assert names == ["naive", "naive-2", "naive-3"]
    assert runner.new_run_dir(tmp_path, "a/b").name == "a_b"


def test_analysis_dir_rules(tmp_path):
    fresh = tmp_path / "fresh"
    assert runner.new_analysis_dir(fresh, "run") == fresh and fresh.is_dir()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert runner.new_analysis_dir(empty, "run") == empty  # an empty folder made beforehand is used
    (fresh / "x").write_text("")
    with pytest.raises(UsageError, match="not a folder"):
        runner.new_analysis_dir(fresh / "x", "run")
    assert runner.new_analysis_dir(None, "shake", default_parent=tmp_path / "out") == tmp_path / "out" / "shake"


def test_one_analysis_per_out_folder(tmp_path):
    """A rerun into --out replaces the previous analysis (kept aside as OUT.prev until the new
    one is complete, then removed; kept with keep_previous); never a nested subfolder."""
    out, prev = tmp_path / "out", tmp_path / "out.prev"
    assert runner.new_analysis_dir(out, "run") == out
    (out / "report.json").write_text("old")
    assert runner.new_analysis_dir(out, "run") == out and not (out / "run").exists()
    assert (prev / "report.json").read_text() == "old" and not (out / "report.json").exists()
    finish_analysis_dir(out)  # complete: the previous one goes
    assert not prev.exists() and json.loads((out / runner.CLAIM_NAME).read_text())["complete"] is True
    (out / "report.json").write_text("second")
    assert runner.new_analysis_dir(out, "run", keep_previous=True) == out
    finish_analysis_dir(out)
    assert (prev / "report.json").read_text() == "second" and not (prev / REPLACED_NAME).exists()
    # an older OUT.prev analysis makes way for the next previous one
    (out / "report.json").write_text("third")
    runner.new_analysis_dir(out, "run", keep_previous=True)
    assert (prev / "report.json").read_text() == "third"


def test_out_folders_that_are_not_replaced(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="non-empty folder that holds no lar-prec analysis"):
        runner.new_analysis_dir(other, "run")
    assert (other / "notes.txt").read_text() == "mine"
    (other / "report.json").write_text('{"schema": "lar-prec.report/1"}')  # a --json report.json put there
    with pytest.raises(UsageError, match="holds no lar-prec analysis"):
        runner.new_analysis_dir(other, "run")
    # a previous analysis holding a file this one reads, or the current folder, is not replaced
    held = tmp_path / "held"
    runner.new_analysis_dir(held, "run")
    (held / "model.mge").write_bytes(b"m")
    with pytest.raises(UsageError, match="a file this analysis reads"):
        runner.new_analysis_dir(held, "run", needed=[held / "model.mge"])
    cwd = os.getcwd()
    try:
        os.chdir(held)
        with pytest.raises(UsageError, match="the current folder"):
            runner.new_analysis_dir(".", "run")
    finally:
        os.chdir(cwd)
    assert (held / "model.mge").exists() and not (tmp_path / "held.prev").exists()
    assert runner.new_analysis_dir(held, "run", replace=False) == held / "run"  # the zoo's way
    out = tmp_path / "out"
    runner.new_analysis_dir(out, "run")
    (tmp_path / "out.prev").mkdir()
    (tmp_path / "out.prev" / "mine.txt").write_text("")
    with pytest.raises(UsageError, match="out.prev exists and holds no lar-prec analysis"):
        runner.new_analysis_dir(out, "run")
    # an analysis another live lar-prec is still writing is never moved from under it
    busy = tmp_path / "busy"
    busy.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (busy / runner.CLAIM_NAME).write_text(json.dumps({"command": "shake", "pid": child.pid,
                                                           "host": socket.gethostname()}))
        with pytest.raises(UsageError, match=f"another lar-prec \\(pid {child.pid}\\) is still writing"):
            runner.new_analysis_dir(busy, "run")
    finally:
        child.kill()
        child.wait()
    assert runner.new_analysis_dir(busy, "run") == busy  # its writer gone: replaced


def test_prepare_inputs_forms(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 2), np.float16))
    js = tmp_path / "in.json"
    js.write_text(json.dumps({"j": {"shape": [2], "type": "int32", "raw": [5, 6]}}))
    p = runner.prepare_inputs([f"a:{x};r:{{1,3,4}}", "l:[1.5,2]", f"j:{js}"], tmp_path / "inputs", seed=7)
    by = {i.name: i for i in p.items}
    assert set(by) == {"a", "r", "l", "j"}
    assert np.load(by["a"].path).dtype == np.float16 and by["a"].source == f"a:{x}"
    assert by["r"].generated["seed"] == 7 + 1 and by["r"].shape == (1, 3, 4) and by["r"].dtype == "float32"
    assert np.load(by["l"].path).tolist() == [1.5, 2.0]
    assert np.load(by["j"].path).tolist() == [5, 6]
    assert p.input_arg == ";".join(f"{n}:{by[n].path}" for n in ("a", "r", "l", "j"))
    recorded = json.loads((tmp_path / "inputs" / "inputs.json").read_text())["inputs"]
    assert [r["sha256"] for r in recorded] == [i.sha256 for i in p.items]
    # the same seed gives the same random data: runs of one analysis are repeatable
    again = runner.prepare_inputs([f"r:{{1,3,4}}"], tmp_path / "again", seed=8)
    np.testing.assert_array_equal(np.load(again.items[0].path), np.load(by["r"].path))
    assert runner.prepare_inputs([], tmp_path / "none").input_arg == ""


@pytest.mark.parametrize("spec, message", [
    ("data:foo.txt", "cannot parse --input item"),
    ("data:{1,x}", "bad shape"),
    ("data:[1,,]", "bad literal"),
    ("data:missing.npy", "does not exist"),
    ("a:[1];a:[2]", "given twice"),
])
def test_prepare_inputs_errors(tmp_path, spec, message):
    with pytest.raises(UsageError, match=message):
        runner.prepare_inputs([spec], tmp_path / "inputs")


# ----------------------------------------------------------------------------- external binary


def test_external_binary_gets_expected_argv_and_env(fake_lar, model_file, prepared, tmp_path, monkeypatch):
    monkeypatch.setenv("MGB_USE_MEGDNN_DBG", "1")  # a stale shell value must not leak into default runs
    out = tmp_path / "analysis"
    results = {}
    for name in ("naive", "default", "reproducible", "fast-run"):
        results[name] = runner.run_once(model_file, prepared, name, out, lar=str(fake_lar.path),
                                        extra_env={"MGB_DUMP_INPUT": "1"} if name == "default" else None)
    calls = fake_lar.calls()
    assert len(calls) == 4
    flags = {"naive": ["--cpu"], "default": ["--cpu"], "reproducible": ["--cpu", "--reproducible"],
             "fast-run": ["--cpu", "--fast-run"]}
    for call, (name, res) in zip(calls, results.items()):
        assert call["args"] == [str(model_file), "--input", prepared.input_arg,
                                "--bin-io-dump", str(res.dump_dir), "--iter", "1", "--warmup-iter", "0",
                                *flags[name]]
        assert list(res.argv) == [str(fake_lar.path), *call["args"]]
        assert res.ok and not res.incomplete and res.returncode == 0 and res.signal is None
        assert not (res.dump_dir / runner.INCOMPLETE_MARKER).exists()
    assert calls[0]["env"] == {"MGB_USE_MEGDNN_DBG": "2"}
    assert calls[1]["env"] == {"MGB_DUMP_INPUT": "1"}
    assert calls[2]["env"] == {} and calls[3]["env"] == {}
    entry = run_from_result(results["naive"]).to_json()
    assert entry["label"] == "naive" and entry["returncode"] == 0 and entry["argv"] == list(results["naive"].argv)
    info = runner.read_run_json(results["naive"].dir)
    assert info["status"] == "ok" and info["env_changes"] == {"MGB_USE_MEGDNN_DBG": "2"}
    assert info["load_and_run"]["kind"] == "external" and info["load_and_run"]["version"] == "load_and_run (fake) 1.13.0"
    assert info["model"]["sha256"] == runner.sha256_file(model_file)
    assert info["inputs"][0]["sha256"] == prepared.items[0].sha256
    assert info["returncode"] == 0 and info["seconds"] > 0 and info["started"]


def test_env_variable_selects_the_binary_and_text_dump(fake_lar, model_file, prepared, tmp_path, monkeypatch):
    monkeypatch.setenv("LAR_PREC_LOAD_AND_RUN", str(fake_lar.path))
    res = runner.run_once(model_file, prepared, "default", tmp_path / "a", text_dump=True)
    assert res.label == "default-text" and res.dump_dir is None and res.text_dump.exists()
    argv = fake_lar.calls()[0]["args"]
    assert res.argv[0] == str(fake_lar.path) and argv[argv.index("--io-dump") + 1] == str(res.text_dump)
    assert "--bin-io-dump" not in argv


def test_timeout_kills_the_process_group(fake_lar, model_file, prepared, tmp_path, monkeypatch):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_LAR_MODE", "sleep")
    monkeypatch.setenv("FAKE_LAR_CHILD_PID", str(pid_file))
    with pytest.raises(RunTimeout) as exc:
        runner.run_once(model_file, prepared, "default", tmp_path / "a", lar=str(fake_lar.path), timeout=1.5)
    assert exc.value.exit_code == 3 and "did not finish within 1.5 s" in str(exc.value)
    res = exc.value.result
    assert res.status == "timeout" and res.incomplete and res.dir.is_dir()
    info = runner.read_run_json(res.dir)
    assert info["status"] == "timeout" and info["incomplete"] is True and info["timeout"] == 1.5
    # the grandchild `sleep 60` was in the same group: it is gone too
    assert wait_gone(int(pid_file.read_text()), 5)


def test_failing_binary_reports_its_message(fake_lar, model_file, prepared, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LAR_MODE", "exit1")
    with pytest.raises(RunError) as exc:
        runner.run_once(model_file, prepared, "default", tmp_path / "a", lar=str(fake_lar.path))
    msg = str(exc.value)
    assert "failed (exit 1)" in msg and "fake load_and_run error" in msg and "\n" not in msg
    assert exc.value.returncode == 1 and "what():" in exc.value.stderr_tail
    res = exc.value.result
    assert res.status == "failed" and (res.dump_dir / runner.INCOMPLETE_MARKER).exists()
    assert runner.read_run_json(res.dir)["error"] == msg


def test_missing_model_is_an_input_error_with_run_json(fake_lar, prepared, tmp_path):
    with pytest.raises(UsageError, match="does not exist") as exc:
        runner.run_once(tmp_path / "nope.mge", prepared, "default", tmp_path / "a", lar=str(fake_lar.path))
    assert exc.value.exit_code == 2
    info = runner.read_run_json(exc.value.run_dir)
    assert info["status"] == "not_started" and "nope.mge" in info["error"]
    assert fake_lar.calls() == []


# ----------------------------------------------------------------------------- real runs


@pytest.fixture
def real_dump_env(lar_dump, monkeypatch):
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP", str(lar_dump("cnn", "default")))


@pytest.mark.megengine
def test_segfault_keeps_half_written_dump(fake_lar, real_dump_env, model_file, prepared, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LAR_MODE", "segv")
    with pytest.raises(RunError) as exc:
        runner.run_once(model_file, prepared, "naive", tmp_path / "a", lar=str(fake_lar.path))
    assert "killed by SIGSEGV" in str(exc.value)
    res = exc.value.result
    assert (res.status, res.signal, res.returncode, res.incomplete) == ("crashed", "SIGSEGV", -signal.SIGSEGV, True)
    folder = DumpFolder(res.dump_dir)
    assert folder.incomplete and 0 < len(folder) < len(DumpFolder(os.environ["FAKE_LAR_SOURCE_DUMP"]))
    info = runner.read_run_json(res.dir)
    assert info["signal"] == "SIGSEGV" and info["incomplete"] is True and info["status"] == "crashed"


@pytest.mark.megengine
def test_real_runs_of_a_convolution_case(manifest, tmp_path):
    case = manifest["cnn"]
    out = runner.new_analysis_dir(tmp_path / "cnn", "test")
    inputs = runner.prepare_inputs(case.input_specs(), out / "inputs", case.model)
    naive = runner.run_once(case.model, inputs, "naive", out)
    d1 = runner.run_once(case.model, inputs, "default", out)
    d2 = runner.run_once(case.model, inputs, "default", out)
    text = runner.run_once(case.model, inputs, "default", out, text_dump=True)
    assert [r.dir.name for r in (naive, d1, d2, text)] == ["naive", "default", "default-2", "default-text"]
    assert "init dnn handle with debug level: 2" in naive.stderr_tail
    fn, f1, f2 = DumpFolder(naive.dump_dir), DumpFolder(d1.dump_dir), DumpFolder(d2.dump_dir)
    assert sorted(fn.ids) == sorted(f1.ids) == sorted(f2.ids)
    for i in f1.ids:  # two default runs are bitwise equal
        assert f1[i].path.read_bytes() == f2[i].path.read_bytes()
    convs = [i for i in f1.ids if f1[i].var.opr_type == "ConvolutionForward"]
    assert convs and any(fn[i].path.read_bytes() != f1[i].path.read_bytes() for i in convs)
    assert sorted(read_text_dump(text.text_dump).order) == sorted(f1.ids)
    info = runner.read_run_json(naive.dir)
    assert info["load_and_run"]["kind"] == "bundled" and "megenginelite 1.13" in info["load_and_run"]["version"]
    assert info["megengine_version"] == "1.13.0" and info["model"]["sha256"] == runner.sha256_file(case.model)


@pytest.mark.megengine
def test_fast_run_picks_algorithms_and_the_policy_file_replays_them(manifest, tmp_path):
    case = manifest["fastrun_shake"]
    out = tmp_path / "a"
    inputs = runner.prepare_inputs(case.input_specs(), out / "inputs")
    policy = tmp_path / "algo.cache"
    default = runner.run_once(case.model, inputs, "default", out)
    fast = runner.run_once(case.model, inputs, "fast-run", out, extra_flags=["--fast-run-algo-policy", str(policy)])
    assert "enable fast-run strategy" in fast.stderr_tail and policy.stat().st_size > 0
    replay = runner.run_once(case.model, inputs, "default", out, extra_flags=["--fast-run-algo-policy", str(policy)])
    fd, ff, fr = DumpFolder(default.dump_dir), DumpFolder(fast.dump_dir), DumpFolder(replay.dump_dir)
    assert any(fd[i].path.read_bytes() != ff[i].path.read_bytes() for i in fd.ids)
    assert all(ff[i].path.read_bytes() == fr[i].path.read_bytes() for i in ff.ids)
    repro = runner.run_once(case.model, inputs, "reproducible", out)
    assert "--reproducible" in repro.argv and "enable reproducible strategy" in repro.stderr_tail


@pytest.mark.megengine
def test_real_failures(manifest, tmp_path):
    fp16, cnn, bn = manifest["fp16"], manifest["cnn"], manifest["bn_unfused"]
    wrong = runner.prepare_inputs(cnn.input_specs(), tmp_path / "in_cnn")
    with pytest.raises(RunError) as exc:
        runner.run_once(fp16.model, wrong, "default", tmp_path / "a")
    assert exc.value.exit_code == 3
    assert "dtype mismatch" in str(exc.value) and "float16" in str(exc.value) and "float32" in str(exc.value)
    bn_in = runner.prepare_inputs(bn.input_specs(), tmp_path / "in_bn")
    with pytest.raises(RunError) as exc:
        runner.run_once(bn.model, bn_in, "naive", tmp_path / "a")
    assert "optimize_for_inference=True" in str(exc.value) and "is_contiguous" in str(exc.value)
    info = runner.read_run_json(exc.value.run_dir)
    assert info["status"] == "failed" and info["returncode"] == 1 and "is_contiguous" in info["stderr_tail"]
    assert DumpFolder(exc.value.result.dump_dir).incomplete


# ----------------------------------------------------------------------------- lar-prec run


def test_cli_run_with_external_binary(fake_lar, model_file, tmp_path, monkeypatch):
    x = tmp_path / "x.npy"
    np.save(x, np.zeros(3, np.float32))
    cli_runner = CliRunner(mix_stderr=False)
    args = ["run", str(model_file), "--config", "naive", "--input", f"data:{x}", "--lar", str(fake_lar.path),
            "--out", str(tmp_path / "out"), "--lar-args", "--multithread 2", "--env", "MGB_DUMP_INPUT=1"]
    res = cli_runner.invoke(cli, args)
    assert res.exit_code == 0, res.stderr
    run_dir = Path(res.stdout.strip())
    assert run_dir == tmp_path / "out" / "naive" and (run_dir / "run.json").exists()
    call = fake_lar.calls()[0]
    assert call["args"][-3:] == ["--cpu", "--multithread", "2"]
    assert call["env"] == {"MGB_USE_MEGDNN_DBG": "2", "MGB_DUMP_INPUT": "1"}
    # a rerun into --out replaces the analysis there (issue 53): no nested folder, no OUT.prev left
    res = cli_runner.invoke(cli, args)
    assert res.exit_code == 0 and Path(res.stdout.strip()) == tmp_path / "out" / "naive"
    assert not (tmp_path / "out" / "run").exists() and not (tmp_path / "out.prev").exists()

    monkeypatch.setenv("FAKE_LAR_MODE", "segv")
    res = cli_runner.invoke(cli, args)
    assert res.exit_code == 3
    first = res.stderr.splitlines()[0]
    assert first.startswith("Error: load_and_run was killed by SIGSEGV")

    monkeypatch.setenv("FAKE_LAR_MODE", "sleep")
    res = cli_runner.invoke(cli, [*args, "--timeout", "1"])
    assert res.exit_code == 3 and "did not finish within 1 s" in res.stderr


def test_cli_run_usage_errors(fake_lar, model_file, tmp_path):
    cli_runner = CliRunner(mix_stderr=False)
    out = tmp_path / "out"
    res = cli_runner.invoke(cli, ["run", str(model_file), "--input", "data:foo.txt", "--out", str(out),
                                  "--lar", str(fake_lar.path)])
    assert res.exit_code == 2 and res.stderr.startswith("Error: cannot parse --input item")
    assert not out.exists()  # input errors are found before the folder is made
    res = cli_runner.invoke(cli, ["run", str(tmp_path / "nope.mge"), "--out", str(tmp_path / "o2"),
                                  "--lar", str(fake_lar.path)])
    assert res.exit_code == 2 and "nope.mge does not exist" in res.stderr
    assert not (tmp_path / "o2").exists()
    res = cli_runner.invoke(cli, ["run", str(model_file), "--lar", str(tmp_path / "missing_lar")])
    assert res.exit_code == 2 and "does not exist" in res.stderr
    res = cli_runner.invoke(cli, ["run", str(model_file), "--config", "weird"])
    assert res.exit_code == 2


@pytest.mark.megengine
def test_cli_run_bundled_bn_unfused_hint(manifest, tmp_path):
    case = manifest["bn_unfused"]
    res = CliRunner(mix_stderr=False).invoke(cli, ["run", str(case.model), *sum((["--input", s] for s in case.input_specs()), []),
                                                   "--out", str(tmp_path / "o"), "--lar", "bundled"])
    assert res.exit_code == 3
    assert "optimize_for_inference=True" in res.stderr.splitlines()[0]
    assert (tmp_path / "o" / "default" / "run.json").exists()


def test_keyboard_interrupt_kills_the_run_and_marks_it(fake_lar, model_file, prepared, tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("FAKE_LAR_MODE", "sleep")
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_LAR_CHILD_PID", str(pid_file))
    main = threading.main_thread().ident

    def interrupt():  # a real SIGINT, as from Ctrl-C, once the run is under way
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        runner.run_once(model_file, prepared, "default", tmp_path / "a", lar=str(fake_lar.path))
    info = runner.read_run_json(tmp_path / "a" / "default")
    assert info["status"] == "interrupted" and info["incomplete"] is True
    assert wait_gone(int(pid_file.read_text()), 5)


def test_plain_npy_inputs_are_copied_byte_for_byte_and_others_converted(tmp_path):
    """A little-endian C-order file goes to every run unchanged (no numpy round trip); a
    big-endian or Fortran-order one is converted to what load_and_run reads."""
    plain = tmp_path / "plain.npy"
    np.save(plain, np.arange(12, dtype="<f4").reshape(3, 4))
    big = tmp_path / "big.npy"
    np.save(big, np.arange(6, dtype=">i4").reshape(2, 3))
    fort = tmp_path / "fort.npy"
    np.save(fort, np.asfortranarray(np.arange(6, dtype="f4").reshape(2, 3)))
    prepared = runner.prepare_inputs([f"a:{plain}", f"b:{big}", f"c:{fort}"], tmp_path / "in")
    by_name = {p.name: p for p in prepared.items}
    assert by_name["a"].path.read_bytes() == plain.read_bytes()
    assert (by_name["a"].dtype, by_name["a"].shape) == ("float32", (3, 4))
    b = np.load(by_name["b"].path)
    assert b.dtype == np.dtype("<i4") and b.tolist() == [[0, 1, 2], [3, 4, 5]]
    c = np.load(by_name["c"].path)
    assert c.flags["C_CONTIGUOUS"] and c.tolist() == [[0, 1, 2], [3, 4, 5]]
    truncated = tmp_path / "cut.npy"
    truncated.write_bytes(plain.read_bytes()[:-4])
    with pytest.raises(UsageError, match="cut.npy"):
        runner.prepare_inputs([f"a:{truncated}"], tmp_path / "in2")


def test_a_dead_run_is_seen_in_seconds_not_at_the_timeout(fake_lar, model_file, prepared, tmp_path, monkeypatch):
    """Issue 21 §2: alive but using no CPU (MegEngine after an Xbyak JIT error) is `stalled`
    after the grace period, with the last fatal-looking stderr line; not `timeout` at 120 s."""
    monkeypatch.setenv("FAKE_LAR_MODE", "stall")
    monkeypatch.setenv("LAR_PREC_STALL_AFTER", "1.5")
    t0 = time.monotonic()
    with pytest.raises(RunError) as exc:
        runner.run_once(model_file, prepared, "default", tmp_path / "a", lar=str(fake_lar.path), timeout=120)
    took = time.monotonic() - t0
    assert took < 30, took
    res = exc.value.result
    assert res.status == "stalled" and exc.value.exit_code == 3
    assert "stalled after: bad err=45 in Xbyak::Error" in str(exc.value)
    assert runner.read_run_json(res.dir)["status"] == "stalled"


def test_a_busy_slow_run_is_never_ended_early(fake_lar, model_file, prepared, tmp_path, monkeypatch):
    """A run that keeps using CPU past the grace period finishes, and one past its timeout is
    `timeout` (hung), not `stalled`."""
    monkeypatch.setenv("FAKE_LAR_MODE", "busy")
    monkeypatch.setenv("FAKE_LAR_BUSY_SECONDS", "4")
    monkeypatch.setenv("LAR_PREC_STALL_AFTER", "1")
    res = runner.run_once(model_file, prepared, "default", tmp_path / "a", lar=str(fake_lar.path), timeout=60)
    assert res.status == "ok" and res.seconds >= 4
    with pytest.raises(RunTimeout) as exc:
        runner.run_once(model_file, prepared, "default", tmp_path / "b", lar=str(fake_lar.path), timeout=2)
    assert exc.value.result.status == "timeout"


@pytest.mark.parametrize("value", ["soon", "-1", "inf"])
def test_a_bad_stall_setting_is_refused_before_the_run(fake_lar, model_file, prepared, tmp_path, monkeypatch, value):
    monkeypatch.setenv("LAR_PREC_STALL_AFTER", value)
    with pytest.raises(UsageError, match="LAR_PREC_STALL_AFTER"):
        runner.run_once(model_file, prepared, "default", tmp_path / "a", lar=str(fake_lar.path), timeout=60)
    assert not fake_lar.calls()
