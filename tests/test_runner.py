"""The runner: configurations, load_and_run resolution, inputs, run folders, failures, `lar-prec run`.

External load_and_run binaries are played by ``tests/fake_lar.py`` behind a shell wrapper;
real runs go through the bundled load_and_run on the built cases.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from proc_helpers import ctrl_c, wait_gone
from lar_prec import runner
from lar_prec.cli import cli
from lar_prec.errors import LoadAndRunNotFound, RunError, RunTimeout, UsageError
from lar_prec.iodump import DumpFolder, read_text_dump

FAKE = Path(__file__).resolve().parent / "fake_lar.py"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Runs must not depend on the developer's shell."""
    for name in ("LAR_PREC_LOAD_AND_RUN", "MGB_USE_MEGDNN_DBG", "MGB_DUMP_INPUT", "FAKE_LAR_MODE",
                 "FAKE_LAR_SOURCE_DUMP", "FAKE_LAR_SOURCE_TEXT", "FAKE_LAR_RECORD", "FAKE_LAR_CHILD_PID",
                 "FAKE_LAR_VERSION_MODE", "FAKE_LAR_VERSION_CHILD_PID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_lar(tmp_path, monkeypatch):
    """An executable ``load_and_run`` (shell wrapper around fake_lar.py) and its argv record."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "load_and_run"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    wrapper.chmod(0o755)
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LAR_RECORD", str(record))

    class Fake:
        path = wrapper

        @staticmethod
        def calls():
            return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return Fake


@pytest.fixture
def model_file(tmp_path):
    """A model file for runs of the fake binary (which never reads it)."""
    p = tmp_path / "model.mge"
    p.write_bytes(b"fake model bytes")
    return p


@pytest.fixture
def prepared(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.arange(6, dtype=np.float32).reshape(2, 3))
    return runner.prepare_inputs([f"data:{x}"], tmp_path / "analysis" / "inputs")


# ----------------------------------------------------------------------------- configurations


def test_configs():
    assert set(runner.CONFIGS) == {"naive", "default", "reproducible", "fast-run"}
    naive = runner.get_config("naive")
    assert naive.env_dict() == {"MGB_USE_MEGDNN_DBG": "2"} and "--cpu" in naive.flags
    # a debug level inherited from the shell must not turn "default" into naive
    for name in ("default", "reproducible", "fast-run"):
        assert runner.get_config(name).env_dict() == {"MGB_USE_MEGDNN_DBG": None}
    assert runner.get_config("fast_run").flags == ("--fast-run",)
    assert runner.get_config("reproducible").flags == ("--reproducible",)
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
    # claimed: a second analysis never shares it, even before anything is written in it
    assert runner.new_analysis_dir(fresh, "run") == fresh / "run"
    assert runner.new_analysis_dir(fresh, "run") == fresh / "run-2"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert runner.new_analysis_dir(empty, "run") == empty  # an empty folder made beforehand is used
    (fresh / "x").write_text("")
    with pytest.raises(UsageError, match="not a folder"):
        runner.new_analysis_dir(fresh / "x", "run")
    assert runner.new_analysis_dir(None, "shake", default_parent=tmp_path / "out") == tmp_path / "out" / "shake"


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
    flags = {"naive": ["--cpu"], "default": [], "reproducible": ["--reproducible"], "fast-run": ["--fast-run"]}
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
    entry = results["naive"].report_entry()
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
    # an existing --out is never reused: a numbered subfolder
    res = cli_runner.invoke(cli, args)
    assert res.exit_code == 0 and Path(res.stdout.strip()) == tmp_path / "out" / "run" / "naive"

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


# ----------------------------------------------------------------------------- bad input, full disks, races (issue 12)

ROOT = Path(__file__).resolve().parent.parent


def lar_prec(*args, cwd=None, env=None, timeout=120) -> subprocess.CompletedProcess:
    """The real ``lar-prec`` command in a fresh process."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=cwd or ROOT, env=full,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(code, stderr, *needles):
    """Exit ``code``, ``Error: ...`` first, no traceback of lar-prec, the line names ``needles``."""
    assert "Traceback" not in stderr, stderr
    first = stderr.splitlines()[0] if stderr else ""
    assert first.startswith("Error: "), stderr
    for needle in needles:
        assert needle in first, first
    return first


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(options)`` mounts a tmpfs (e.g. ``size=64k`` or ``ro``) and returns it."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mounted = []

    def mount(options: str) -> Path:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(mnt)
        return mnt

    yield mount
    for m in mounted:
        subprocess.run(["umount", "-l", str(m)], capture_output=True)


@pytest.fixture
def npy_input(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.arange(6, dtype=np.float32))
    return f"data:{x}"


def test_run_into_a_folder_that_cannot_be_written(fake_lar, model_file, npy_input, tmp_path, small_disk):
    cli_runner = CliRunner(mix_stderr=False)
    base = ["run", str(model_file), "--input", npy_input, "--lar", str(fake_lar.path)]
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    res = cli_runner.invoke(cli, [*base, "--out", str(blocker / "sub")])
    assert res.exit_code == 2
    assert_one_line_error(2, res.stderr, str(blocker))
    assert blocker.read_text() == "keep me"
    ro = small_disk("ro,size=64k")
    res = cli_runner.invoke(cli, [*base, "--out", str(ro / "out")])
    assert res.exit_code == 2
    assert_one_line_error(2, res.stderr, str(ro / "out"), "Read-only")
    # the default output folder in a read-only working directory
    proc = lar_prec(*base, cwd=ro)
    assert proc.returncode == 2, proc.stderr
    assert_one_line_error(2, proc.stderr, "lar-prec-out", "Read-only")
    assert fake_lar.calls() == []


def test_full_disk_under_out_never_leaves_a_running_record(fake_lar, model_file, npy_input, tmp_path, small_disk,
                                                            monkeypatch):
    """The disk fills at every point of a run (inputs, run.json, dump): one line, exit 2 or 3,
    no run.json saying "running", no temporary files, the files already there intact."""
    src = tmp_path / "src_dump"
    src.mkdir()
    for k in range(8):
        (src / f"{k:06x}").write_bytes(os.urandom(12 * 1024))
    monkeypatch.setenv("FAKE_LAR_SOURCE_DUMP", str(src))
    disk = small_disk("size=64k")
    cli_runner = CliRunner(mix_stderr=False)
    codes = set()
    for fill in range(0, 64, 4):
        for entry in disk.iterdir():
            subprocess.run(["rm", "-rf", str(entry)], check=True)
        filler = disk / "filler"
        filler.write_bytes(b"\xab" * (fill * 1024))
        res = cli_runner.invoke(cli, ["run", str(model_file), "--input", npy_input, "--lar", str(fake_lar.path),
                                      "--out", str(disk / "out")])
        assert res.exit_code in (2, 3), (fill, res.exit_code, res.stderr, res.exception)
        codes.add(res.exit_code)
        assert_one_line_error(res.exit_code, res.stderr)
        assert filler.read_bytes() == b"\xab" * (fill * 1024)
        leftovers = [p for p in disk.rglob("*") if p.name.endswith(".tmp")]
        assert leftovers == [], (fill, leftovers)
        for record in disk.rglob("run.json"):
            info = json.loads(record.read_text())
            assert info["status"] not in ("running", "ok"), (fill, info["status"])
    assert codes == {2, 3}  # the disk filled up both before and during the run


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "-inf"])
def test_timeout_must_be_a_finite_positive_number(fake_lar, model_file, npy_input, tmp_path, value):
    out = tmp_path / "out"
    res = CliRunner(mix_stderr=False).invoke(cli, ["run", str(model_file), "--input", npy_input, "--lar",
                                                   str(fake_lar.path), "--out", str(out), "--timeout", value])
    assert res.exit_code == 2, (res.stderr, res.exception)
    assert "--timeout" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists() and fake_lar.calls() == []
    with pytest.raises(UsageError, match="finite number of seconds"):
        runner.run_once(model_file, None, "default", tmp_path / "lib", lar=str(fake_lar.path), timeout=float(value))


def test_fifo_input_is_refused_without_leaving_a_folder(fake_lar, model_file, tmp_path):
    fifo = tmp_path / "x.npy"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    proc = lar_prec("run", model_file, "--input", f"data:{fifo}", "--lar", fake_lar.path, "--out", out, timeout=60)
    assert proc.returncode == 2
    assert_one_line_error(2, proc.stderr, str(fifo), "not a regular file")
    assert not out.exists()
    # the model may not be one either
    proc = lar_prec("run", fifo, "--input", f"data:{tmp_path / 'y.npy'}", "--lar", fake_lar.path, "--out", out,
                    timeout=60)
    assert proc.returncode == 2
    assert_one_line_error(2, proc.stderr, "model file", "not a regular file")
    assert not out.exists()


def test_model_path_that_is_a_folder_or_a_symlink_loop(fake_lar, npy_input, tmp_path):
    loop = tmp_path / "loop.mge"
    loop.symlink_to(loop)
    cli_runner = CliRunner(mix_stderr=False)
    for model, says in ((tmp_path, "is a folder"), (loop, "is a symlink loop")):
        for cmd in ("run", "naive-vs-default"):
            res = cli_runner.invoke(cli, [cmd, str(model), "--input", npy_input, "--lar", str(fake_lar.path),
                                          "--out", str(tmp_path / "out")])
            assert res.exit_code == 2, (cmd, res.stderr, res.exception)
            assert_one_line_error(2, res.stderr, says)
    assert fake_lar.calls() == []


def test_seed_must_not_be_negative(fake_lar, model_file, tmp_path):
    out = tmp_path / "out"
    res = CliRunner(mix_stderr=False).invoke(cli, ["run", str(model_file), "--input", "data:{1,3}", "--seed", "-5",
                                                   "--lar", str(fake_lar.path), "--out", str(out)])
    assert res.exit_code == 2, (res.stderr, res.exception)
    assert_one_line_error(2, res.stderr, "--seed")
    assert not out.exists()


@pytest.mark.megengine
def test_input_errors_against_a_real_model_are_exit_2(manifest, tmp_path):
    """Absurd and zero-size shapes, names the model lacks (as a file and as a shape):
    exit 2, one line naming the input and what was expected, no folder left."""
    case = manifest["cnn"]
    data = dict(case.inputs)["data"]
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros((0, 3, 32, 32), np.float32))
    out = tmp_path / "out"
    cli_runner = CliRunner(mix_stderr=False)
    for spec, needles in (("data:{99999,99999,99999}", ("{99999,99999,99999}", "at most")),
                          ("data:{0,3,32,32}", ("'data'", "no elements")),
                          (f"data:{empty}", (str(empty), "no elements")),
                          ("nope:{1,3,32,32}", ("'nope'", "data"))):
        res = cli_runner.invoke(cli, ["run", str(case.model), "--input", spec, "--lar", "bundled",
                                      "--out", str(out)])
        assert res.exit_code == 2, (spec, res.stderr, res.exception)
        assert_one_line_error(2, res.stderr, *needles)
        assert not out.exists()
    # a file for an input the model lacks: found by the run itself (reading the model first
    # would cost every analysis a second), still an input error naming the model's inputs
    for cmd in ("run", "naive-vs-default"):
        res = cli_runner.invoke(cli, [cmd, str(case.model), "--input", f"nope:{data}", "--lar", "bundled",
                                      "--out", str(tmp_path / cmd), "-q"][: None if cmd != "run" else -1])
        assert res.exit_code == 2, (cmd, res.stderr, res.exception)
        assert_one_line_error(2, res.stderr, "no input named 'nope'", "inputs: data")


def test_concurrent_analyses_never_share_a_folder(fake_lar, model_file, npy_input, tmp_path):
    """Ten `run`s started at once with the same missing --out: ten folders, ten good runs."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "lar_prec", "run", str(model_file), "--input", npy_input, "--lar",
            str(fake_lar.path), "--out", str(out)]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(10)]
    results = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, [err for _, err in results]
    run_dirs = [Path(o.strip()) for o, _ in results]
    assert len(set(run_dirs)) == 10
    analyses = {d.parent for d in run_dirs}
    assert len(analyses) == 10  # every analysis in its own folder, inputs included
    for d in run_dirs:
        info = runner.read_run_json(d)
        assert info["status"] == "ok"
        assert all(Path(i["path"]).parent == d.parent / "inputs" for i in info["inputs"])
    assert len(fake_lar.calls()) == 10


@pytest.mark.parametrize("command", ["run", "naive-vs-default"])
def test_ctrl_c_during_the_version_check_stops_the_analysis(fake_lar, model_file, npy_input, tmp_path, command):
    """Ctrl-C from a terminal (SIGINT to the foreground group) while `load_and_run --version`
    hangs: exit 130 at once, no run starts, the check's children are gone."""
    child_pid = tmp_path / "version-child.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_LAR_VERSION_MODE": "sleep",
           "FAKE_LAR_VERSION_CHILD_PID": str(child_pid)}
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "lar_prec", command, str(model_file), "--input", npy_input, "--lar",
            str(fake_lar.path), "--out", str(out), *(["-q"] if command != "run" else [])]
    returncode, err, seconds = ctrl_c(argv, env, child_pid)
    assert returncode == 130, err
    assert seconds < 8
    assert "Traceback" not in err and "interrupted" in err
    assert fake_lar.calls() == []  # no run started after the interrupt
    for record in out.rglob("run.json"):
        info = json.loads(record.read_text())
        assert info["status"] == "interrupted" and info["returncode"] is None
    assert wait_gone(int(child_pid.read_text()))


def test_version_check_honours_the_timeout_and_kills_its_children(fake_lar, model_file, npy_input, tmp_path):
    child_pid = tmp_path / "version-child.pid"
    t0 = time.monotonic()
    proc = lar_prec("run", model_file, "--input", npy_input, "--lar", fake_lar.path, "--out", tmp_path / "out",
                    "--timeout", "2", env={"FAKE_LAR_VERSION_MODE": "sleep",
                                           "FAKE_LAR_VERSION_CHILD_PID": str(child_pid)})
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 9, elapsed  # the old fixed 10 s check alone took longer
    info = runner.read_run_json(proc.stdout.strip())
    assert info["status"] == "ok" and info["load_and_run"]["version"].startswith("unknown (--version did not answer")
    assert wait_gone(int(child_pid.read_text()))


def test_first_failed_run_stops_the_analysis(fake_lar, model_file, npy_input, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LAR_MODE", "exit1")
    cli_runner = CliRunner(mix_stderr=False)
    base = ["naive-vs-default", str(model_file), "--input", npy_input, "--lar", str(fake_lar.path), "-q"]
    res = cli_runner.invoke(cli, [*base, "--out", str(tmp_path / "a")])
    assert res.exit_code == 3, (res.stderr, res.exception)
    assert len(fake_lar.calls()) == 1  # the default run never started
    assert sorted(p.parent.name for p in (tmp_path / "a").glob("*/run.json")) == ["naive"]
    res = cli_runner.invoke(cli, [*base, "--out", str(tmp_path / "b"), "--keep-going"])
    assert res.exit_code == 3
    assert len(fake_lar.calls()) == 3
    assert sorted(p.parent.name for p in (tmp_path / "b").glob("*/run.json")) == ["default", "naive"]


def test_ctrl_c_during_a_run_exits_130_and_marks_it(fake_lar, model_file, npy_input, tmp_path):
    child_pid = tmp_path / "child.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_LAR_MODE": "sleep", "FAKE_LAR_CHILD_PID": str(child_pid)}
    out = tmp_path / "out"
    returncode, err, _ = ctrl_c([sys.executable, "-m", "lar_prec", "run", str(model_file), "--input", npy_input,
                                 "--lar", str(fake_lar.path), "--out", str(out)], env, child_pid)
    assert returncode == 130, err
    assert_one_line_error(130, err, "interrupted", str(out))
    info = runner.read_run_json(out / "default")
    assert info["status"] == "interrupted" and info["returncode"] != 0 and info["incomplete"] is True
    assert wait_gone(int(child_pid.read_text()))
