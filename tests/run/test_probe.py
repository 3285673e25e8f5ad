"""What lar-prec reads from a load_and_run (issue 52): its flags (``--helpfull``), the versions its
runs name on stderr, the model's mode from its first bytes; the flags that would corrupt a run
reserved; inputs a MegEngine load_and_run cannot read refused before any run; and a ``--lar``
that is not load_and_run (another program, garbage, a crash on ``--version``) still an exit 2 or
3 with one ``Error:`` line, never 4. Without the real tool: its answers are quoted from it, the
bundled runner (really run) answers in its form, and the bad binaries are small stand-ins.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from lar_prec.errors import UsageError
from lar_prec.run import probe
from lar_prec.run.argv import check_extra_flags
from lar_prec.run.config import LoadAndRun, bundled_load_and_run

PY = sys.executable

#: the start of MegEngine 1.13's own load_and_run's --helpfull (tests/test_real_lar.py holds it to the tool)
REAL_HELPFULL = """load_and_run: load_and_run <model_path> [options Flags...]

  Flags from gflags/src/gflags.cc:
    -flagfile (load flags from file) type: string default: ""
    -fromenv (set flags from the environment [use 'export FLAGS_flag1=value'])
      type: string default: ""

  Flags from lite/load_and_run/src/options/io_options.cpp:
    -batch_size (set the batch size of input(especially for global layout
      transform optimization working on)) type: int32 default: -1
    -bin_io_dump (set the io dump directory path where variable in binary format
      located) type: string default: ""
    -input (Set up inputs data for model --input [ file_path | data_string])
      type: string default: ""

  Flags from lite/load_and_run/src/options/strategy_options.cpp:
    -iter (iteration number for run model) type: int32 default: 10
    -warmup_iter (iteration number for warm up model before run) type: int32
      default: 1
"""
REAL_STDERR = ("[29 03:55:35 run@strategy_normal.cpp:138] megbrain/lite/load_and_run:\n"
               "using MegBrain 1.13.0(0) and MegDNN 9.3.0\n\n"
               "[29 03:55:35 ModelMdl@model_mdl.cpp:10] creat mdl model use XPU as default comp node\n")


def lar_prec(*args: object, env: dict = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "lar_prec", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          stdin=subprocess.DEVNULL)


def stand_in(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


# ----------------------------------------------------------------------------- parsing


def test_helpfull_is_read_strictly():
    names = probe.parse_helpfull(REAL_HELPFULL)
    assert names == {"flagfile", "fromenv", "batch_size", "bin_io_dump", "input", "iter", "warmup_iter"}
    # continuation lines, prose and a list without load_and_run's own flags name nothing
    assert probe.parse_helpfull("usage: cat [OPTION]... [FILE]...\n  -A, --show-all  equivalent to -vET\n") is None
    assert probe.parse_helpfull("    -input (x) type: string\n") is None  # not load_and_run: no --bin_io_dump
    assert probe.parse_helpfull("    -$(rm -rf x) (y)\n    -input (x)\n    -bin_io_dump (x)\n    -iter (x)\n"
                                "    -warmup_iter (x)\n") == {"input", "bin_io_dump", "iter", "warmup_iter"}


def test_versions_come_from_a_runs_stderr():
    v = probe.versions_from_stderr(REAL_STDERR)
    assert (v.megbrain, v.megbrain_patch, v.megdnn) == ("1.13.0", 0, "9.3.0")
    assert probe.versions_from_stderr("load_and_run version 1.0\n") is None
    assert probe.versions_from_stderr("using MegBrain 1.13(0) and MegDNN 9.3.0") is None


def test_the_models_mode_is_read_from_its_first_16_bytes(manifest, tmp_path):
    assert probe.model_mode(manifest["cnn"].model) == "mdl"  # trace.dump: mgv2 at byte 8
    packed = tmp_path / "packed.lite"
    packed.write_bytes(b"packed_model\x04\x00\x00\x00" + manifest["cnn"].model.read_bytes())
    assert probe.model_mode(packed) == "lite"
    (tmp_path / "short").write_bytes(b"mgb0001")
    assert probe.model_mode(tmp_path / "short") is None
    for magic in (b"mgb0001", b"mgb0000a", b"MGBS", b"MGBC", b"mgbtest0"):
        (tmp_path / "m").write_bytes(magic + b"\0" * 16)
        assert probe.model_mode(tmp_path / "m") == "mdl"


def test_the_bundled_runner_answers_as_megengines_load_and_run():
    run = lambda *a: subprocess.run([PY, "-m", "lar_prec.lar", *a], cwd=ROOT, capture_output=True, text=True,  # noqa: E731
                                    timeout=60)
    v = run("--version")
    assert (v.returncode, v.stdout) == (0, "load_and_run version 1.0\n")
    h = run("--helpfull")
    assert h.returncode == 1  # gflags exits 1 after help
    names = probe.parse_helpfull(h.stdout)
    assert names is not None and {"input", "bin_io_dump", "bin_out_dump", "enable_io16xc32", "cpu"} <= names
    assert "thread" not in names and "cuda" not in names  # flags it does not implement are not listed
    u = run("m.mge", "--enbale-jit")
    assert (u.returncode, u.stderr) == (1, "ERROR: unknown command line flag 'enbale-jit'\n")
    lar = bundled_load_and_run()
    assert probe.lar_flags(lar).has("--enable-io16xc32") and probe.lar_flags(lar).has("--cuda") is False


def test_a_flag_the_binary_lacks_is_refused_before_any_run(tmp_path):
    bundled = bundled_load_and_run()
    with pytest.raises(UsageError, match=r"'--cuda': the bundled runner \(lar_prec.lar\) does not implement --cuda; "
                                         r"run a MegEngine build of load_and_run with --lar PATH"):
        probe.check_flags(bundled, ["--cuda"], "extra load_and_run flag")
    probe.check_flags(bundled, ["--noreproducible", "--multithread", "2", "--iter", "-1"], "extra load_and_run flag")
    # a program whose --helpfull lists no load_and_run flags: nothing refused in advance
    other = stand_in(tmp_path / "other", "echo 'usage: other [options]'\nexit 1\n")
    lar = LoadAndRun(str(other), (str(other),), "external")
    assert probe.lar_flags(lar).names is None and "listed no load_and_run flags" in probe.lar_flags(lar).why
    probe.check_flags(lar, ["--anything"], "extra load_and_run flag")


@pytest.mark.parametrize("flag, why", [
    ("--thread=2", "share load_and_run's one static dumper"),
    ("--copy-to-host", "replaces the output callbacks"),
    ("--flagfile=f", "behind lar-prec's back"),
    ("--fromenv=iter", "behind lar-prec's back"),
    ("--tryfromenv=iter", "behind lar-prec's back"),
    ("--lite", "--reproducible has no effect and --bin-out-dump aborts"),
])
def test_flags_that_corrupt_a_run_are_reserved(flag, why):
    with pytest.raises(UsageError, match=f"'{flag}' is reserved: .*{why}"):
        check_extra_flags([flag])
    check_extra_flags(["--lite=false", "--nocopy_to_host", "--multithread", "2"])


# ----------------------------------------------------------------------------- commands


@pytest.mark.megengine
def test_reserved_flags_and_float16_inputs_are_exit_2_before_any_run(manifest, tmp_path):
    fake = ROOT / "tests" / "fake_lar.py"
    record = tmp_path / "calls.jsonl"
    env = {"FAKE_LAR_RECORD": str(record)}
    case = manifest["cnn"]
    p = lar_prec("naive-vs-default", case.model, "--input", ";".join(case.input_specs()), "--lar", fake,
                 "--out", tmp_path / "a", "-q", "--", "--thread", "2", env=env)
    assert p.returncode == 2 and "'--thread' is reserved" in one_error_line(p)
    fp16 = manifest["fp16"]  # a float16 model input: lar-prec's data for it is float16
    p = lar_prec("naive-vs-default", fp16.model, "--input", ";".join(fp16.input_specs()), "--lar", fake,
                 "--out", tmp_path / "b", "-q", env=env)
    line = one_error_line(p)
    assert p.returncode == 2 and "is float16" in line and "float32, int32, int16, uint16, int8, uint8" in line, line
    assert not record.exists() and not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.megengine
@pytest.mark.parametrize("kind, body", [
    ("another program", 'exec cat "$@"\n'),
    ("prints garbage", "echo '\\033[31m garbage \\377'; echo 'using MegBrain x and MegDNN y' >&2; exit 0\n"),
    ("crashes on --version", '[ "$1" = --version ] && kill -SEGV $$\n[ "$1" = --helpfull ] && kill -SEGV $$\n'
                             'kill -ABRT $$\n'),
    ("hangs on --helpfull, then fails", '[ "$1" = --helpfull ] && exec sleep 30\necho "no" >&2\nexit 1\n'),
])
def test_a_lar_that_is_not_load_and_run_is_exit_2_or_3_with_one_line(manifest, tmp_path, kind, body):
    case = manifest["cnn"]
    lar = stand_in(tmp_path / "lar", body)
    p = lar_prec("naive-vs-default", case.model, "--input", ";".join(case.input_specs()), "--lar", lar,
                 "--out", tmp_path / "out", "-q", "--timeout", "20")
    assert p.returncode in (2, 3), (kind, p.returncode, p.stderr)
    one_error_line(p)


@pytest.mark.megengine
def test_a_text_dump_nobody_asked_for_is_run_again_on_a_zeroed_heap(manifest, lar_dump, tmp_path):
    """MegEngine 1.13's IOdumpOption reads its enable_* switches from uninitialized memory: with a
    long --input (a layerwise model's, seen on the attention case) the real tool logs "enable text
    io dump" unasked and dies of SIGSEGV. The run is made once more with MALLOC_PERTURB_=255
    (every allocation zero-filled), and run.json says so. The stand-in dies as the tool does
    unless the heap is zeroed."""
    fake = ROOT / "tests" / "fake_lar.py"
    lar = stand_in(tmp_path / "lar", f'[ "$MALLOC_PERTURB_" = 255 ] || {{ echo "[x io_options.cpp:222] enable text '
                                     f'io dump to stdout" >&2; kill -SEGV $$; }}\nexec {PY} {fake} "$@"\n')
    case = manifest["cnn"]
    p = lar_prec("run", case.model, "--input", ";".join(case.input_specs()), "--config", "default", "--lar", lar,
                 "--out", tmp_path / "out", env={"FAKE_LAR_SOURCE_DUMP": str(lar_dump("cnn", "default"))})
    assert p.returncode == 0, p.stderr
    run_dir = Path(p.stdout.strip())
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "ok" and rec["env_changes"]["MALLOC_PERTURB_"] == "255"
    assert "enable text io dump" in (run_dir / "stderr-uninitialized.txt").read_text()


def test_check_var_value_names_the_variable_that_changed(tmp_path):
    from lar_prec.run.instruments import check_var_values

    var = ('{id:%d, layout:{1(4),4(1) Float32}, Float32, owner:relu(x)[%d]{Elemwise}, name:%s, slot:0, '
           'CompNode("cpu0:0" from "cpux:0"), s, 4, 8}')
    text = "\n".join([f"VarValueChecker: going to check #0: {var % (3, 2, 'x')}",
                      f"VarValueChecker: going to check #1: {var % (5, 4, 'RELU[0]')}",
                      "terminate called after throwing an instance of 'mgb::opr::AssertEqual::UnequalError'",
                      "  what():  AssertEqual: err=0.5 (name=RELU[0] id=5)"])
    (tmp_path / "err.txt").write_text(text + "\n")
    lar = stand_in(tmp_path / "lar", f'cat {tmp_path / "err.txt"} >&2\nkill -ABRT $$\n')
    chk = check_var_values(LoadAndRun(str(lar), (str(lar),), "external"), "m.mge", "data:x.npy", 2, tmp_path / "c")
    assert chk.checked == 2 and (chk.mismatch.id, chk.mismatch.name, chk.mismatch.opr_type) == (5, "RELU[0]", "Elemwise")
    assert "took other values in another execution" in chk.words() and "AssertEqual" in chk.mismatch.line
