"""The bundled load_and_run (``python -m lar_prec.lar``): flag parsing, inputs, real runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import pytest

from lar_prec.inputspec import load_json_inputs, load_npy, parse_literal, parse_shape, split_input
from lar_prec.lar.flags import parse_options
from lar_prec.errors import UsageError
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.textdump import read_text_dump

ROOT = Path(__file__).resolve().parents[2]


def run_lar(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """One real run of the bundled load_and_run in a fresh process."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("MGB_USE_MEGDNN_DBG", "MGB_DUMP_INPUT")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "lar_prec.lar", *map(str, args)], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=300)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The bundled runner's one error line; also checks that no traceback was printed."""
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("load_and_run: error: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ----------------------------------------------------------------------------- flag parsing


@pytest.mark.parametrize("argv", [
    ["m.mge", "--io-dump", "x.txt"],
    ["m.mge", "--io_dump", "x.txt"],
    ["m.mge", "--io_dump=x.txt"],
    ["m.mge", "-io-dump", "x.txt"],
    ["--io-dump=x.txt", "m.mge"],
])
def test_flag_spellings_are_equivalent(argv):
    opts = parse_options(argv)
    assert opts.model == "m.mge" and opts.io_dump == "x.txt"


def test_bool_flag_forms():
    assert parse_options(["m", "--reproducible"]).reproducible is True
    assert parse_options(["m", "--reproducible=false"]).reproducible is False
    assert parse_options(["m", "--reproducible", "--noreproducible"]).reproducible is False
    assert parse_options(["m", "--fast-run=1"]).fast_run is True
    # gflags: a bool flag never consumes the next word, which then is a stray positional
    with pytest.raises(UsageError, match="unexpected argument 'true'.*--flag=true"):
        parse_options(["m", "--reproducible", "true"])


def test_int_flags_and_defaults():
    opts = parse_options(["m"])
    assert (opts.iter, opts.warmup_iter, opts.multithread) == (10, 1, -1)
    opts = parse_options(["m", "--iter", "3", "--warmup-iter=0", "--multithread", "2"])
    assert (opts.iter, opts.warmup_iter, opts.multithread) == (3, 0, 2)
    with pytest.raises(UsageError, match="illegal value 'x' specified for int flag 'iter'"):
        parse_options(["m", "--iter", "x"])
    with pytest.raises(UsageError, match="must not be negative"):
        parse_options(["m", "--iter", "-1"])
    with pytest.raises(UsageError, match="missing its argument"):
        parse_options(["m", "--iter"])


def test_unknown_and_unsupported_flags():
    with pytest.raises(UsageError, match="unknown command line flag 'enbale-jit'"):  # as typed, as gflags
        parse_options(["m", "--enbale-jit"])
    with pytest.raises(UsageError, match=r"--disable_mem_opt .*does not support.*--lar PATH"):
        parse_options(["m", "--disable-mem-opt"])
    with pytest.raises(UsageError, match=r"--workspace_limit .*--lar PATH"):
        parse_options(["m", "--workspace_limit=5"])
    assert parse_options(["m", "--bin_out_dump=d"]).bin_out_dump == "d"  # implemented: shake's observer check


def test_conflicting_options_are_refused():
    with pytest.raises(UsageError, match="one dumper"):
        parse_options(["m", "--io-dump", "a.txt", "--bin-io-dump", "d"])
    with pytest.raises(UsageError, match="--bin_out_dump and"):
        parse_options(["m", "--bin-out-dump", "o", "--bin-io-dump", "d"])
    with pytest.raises(UsageError, match="together"):
        parse_options(["m", "--fast-run", "--full-run"])
    with pytest.raises(UsageError, match="no model"):
        parse_options(["--iter", "1"])


def test_algo_policy_file_needs_fast_run_when_missing(tmp_path):
    missing = tmp_path / "algo.cache"
    with pytest.raises(UsageError, match="--fast_run or --full_run"):
        parse_options(["m", "--fast-run-algo-policy", str(missing)])
    assert parse_options(["m", "--fast-run", "--fast-run-algo-policy", str(missing)]).fast_run


# ----------------------------------------------------------------------------- --input forms


def test_split_input_forms():
    items = split_input("a:x.npy;b:{1,3,8,8};c:[1,2];y.npy;d:in.json")
    assert [(i.name, i.kind, i.text) for i in items] == [
        ("a", "npy", "x.npy"), ("b", "shape", "{1,3,8,8}"), ("c", "literal", "[1,2]"),
        ("data", "npy", "y.npy"), ("d", "json", "in.json"),
    ]
    # the name ends at the FIRST colon; the rest may contain colons
    assert split_input("a:C:/x.npy")[0].text == "C:/x.npy"
    with pytest.raises(UsageError, match="cannot parse --input item"):
        split_input("a:foo.txt")


def test_shape_and_literal_values():
    assert parse_shape("{1,3,224,224}") == (1, 3, 224, 224)
    with pytest.raises(UsageError, match="bad shape"):
        parse_shape("{1,x}")
    ints = parse_literal("[1,3,224,224]")
    assert ints.dtype == np.int32 and ints.shape == (4,)  # brackets are data, not a shape
    floats = parse_literal("[[1.,2],[3,4]]")
    assert floats.dtype == np.float32 and floats.shape == (2, 2)
    with pytest.raises(UsageError, match="bad literal"):
        parse_literal("[1,,2]")


def test_json_and_npy_inputs(tmp_path):
    js = tmp_path / "in.json"
    js.write_text(json.dumps({"data": {"shape": [2, 2], "type": "int32", "raw": [1, 2, 3, 4]}}))
    arr = load_json_inputs(str(js))["data"]
    assert arr.dtype == np.int32 and arr.tolist() == [[1, 2], [3, 4]]
    js.write_text(json.dumps({"data": {"shape": [2, 2], "type": "float32", "raw": [1]}}))
    with pytest.raises(UsageError, match="1 values for shape"):
        load_json_inputs(str(js))
    np.save(tmp_path / "f8.npy", np.zeros(3, np.float64))
    with pytest.raises(UsageError, match="dtype float64"):
        load_npy(str(tmp_path / "f8.npy"))
    np.save(tmp_path / "be.npy", np.arange(3, dtype=">f4"))
    be = load_npy(str(tmp_path / "be.npy"))
    assert be.dtype == np.float32 and be.dtype.isnative and be.tolist() == [0, 1, 2]
    with pytest.raises(UsageError, match="does not exist"):
        load_npy(str(tmp_path / "missing.npy"))


def test_importing_lar_does_not_import_megengine():
    code = "import sys, lar_prec.lar; print('megengine' in sys.modules or 'megenginelite' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_usage_errors_exit_1_with_one_line():
    proc = run_lar("m.mge", "--disable-mem-opt")
    assert proc.returncode == 1
    assert "--lar PATH" in error_line(proc)
    proc = run_lar("--version")
    assert proc.returncode == 0 and proc.stdout == "load_and_run version 1.0\n"  # as MegEngine's tool answers


# ----------------------------------------------------------------------------- real runs


@pytest.mark.megengine
def test_text_and_binary_dumps_describe_the_same_variables(lar_dump):
    folder = DumpFolder(lar_dump("cnn", "default"))
    text = read_text_dump(lar_dump("cnn", "default", text=True))
    assert len(text.executions) == 1 and text.truncated is None
    assert sorted(folder.ids) == sorted(text.order)
    last = text.last()
    for dump in folder:
        assert last[dump.id].opr_type == dump.var.opr_type
        assert last[dump.id].shape == dump.shape


@pytest.mark.megengine
def test_naive_level_reaches_the_runtime(manifest, tmp_path):
    """MGB_USE_MEGDNN_DBG is read by MegEngine in the fresh process: convolutions change."""
    case = manifest["cnn"]
    dumps = {}
    for level in ("0", "2"):
        out = tmp_path / f"level{level}"
        proc = run_lar(case.model, "--input", ";".join(case.input_specs()), "--bin-io-dump", out,
                       "--iter", "1", "--warmup-iter", "0", env={"MGB_USE_MEGDNN_DBG": level})
        assert proc.returncode == 0, proc.stderr
        assert ("init dnn handle with debug level: 2" in proc.stderr) == (level == "2")
        dumps[level] = DumpFolder(out)
    convs = [d.id for d in dumps["0"] if d.var.opr_type == "ConvolutionForward"]
    assert convs
    assert any(not np.array_equal(dumps["0"][i].array(), dumps["2"][i].array()) for i in convs)


@pytest.mark.megengine
def test_float16_input_and_iterations_append_to_text_dump(manifest, tmp_path):
    case = manifest["fp16"]
    text = tmp_path / "io.txt"
    proc = run_lar(case.model, "--input", ";".join(case.input_specs()), "--io-dump", text,
                   "--iter", "2", "--warmup-iter", "1")
    assert proc.returncode == 0, proc.stderr
    assert "warm up iter 0" in proc.stderr and "iter 1/2" in proc.stderr
    dump = read_text_dump(text)
    assert len(dump.executions) == 3  # warm-up + 2 iterations, each appended
    assert any(v.dtype == "Float16" for v in dump.last().values())


@pytest.mark.megengine
def test_multi_input_shape_only_and_model_info(manifest, tmp_path):
    case = manifest["multi_input"]
    img = dict(case.inputs)["img"]
    out = tmp_path / "d"  # missing: the bundled runner creates it (the real one aborts)
    proc = run_lar(case.model, "--input", f"img:{img};meta:{{2,6}}", "--bin-io-dump", out,
                   "--iter", "1", "--warmup-iter", "0", "--model-info", "--multithread", "2")
    assert proc.returncode == 0, proc.stderr
    assert "| input  | meta" in proc.stderr and "{2,6}" in proc.stderr and "| output" in proc.stderr
    folder = DumpFolder(out)
    meta = [d for d in folder if d.var.opr_type == "Host2DeviceCopy" and d.shape == (2, 6)]
    assert len(meta) == 1
    # shape-only inputs are filled with the byte 0x01, like load_and_run's memset
    assert np.all(meta[0].array().view(np.uint8) == 1)


@pytest.mark.megengine
def test_cpu_default_runs_inplace_with_the_same_outputs(manifest, tmp_path):
    # --cpu-default (the real binary's inplace CPU device): the kernels run in the calling thread;
    # the same kernels as the worker thread's, so the same bits (sweep's timed runs use it)
    assert parse_options(["m", "--cpu-default"]).cpu_default
    case = manifest["cnn"]
    outs = {}
    for name, more in (("plain", ()), ("inplace", ("--cpu-default",))):
        proc = run_lar(case.model, "--input", ";".join(case.input_specs()), "--bin-io-dump", tmp_path / name,
                       "--iter", "1", "--warmup-iter", "0", *more)
        assert proc.returncode == 0, proc.stderr
        outs[name] = {d.var.name: d.array() for d in DumpFolder(tmp_path / name)}
    assert outs["plain"].keys() == outs["inplace"].keys() and outs["plain"]
    for k, a in outs["plain"].items():
        assert a.tobytes() == outs["inplace"][k].tobytes(), k


@pytest.mark.megengine
def test_dump_input_env_writes_input_files(manifest, tmp_path):
    case = manifest["mlp"]
    proc = run_lar(case.model, "--input", ";".join(case.input_specs()), "--bin-io-dump", tmp_path,
                   "--iter", "1", "--warmup-iter", "0", env={"MGB_DUMP_INPUT": "1"})
    assert proc.returncode == 0, proc.stderr
    assert DumpFolder(tmp_path).input_files


@pytest.mark.megengine
def test_record_comp_seq_dumps_are_complete_on_exit(manifest, lar_dump, tmp_path):
    case = manifest["cnn"]
    proc = run_lar(case.model, "--input", ";".join(case.input_specs()), "--bin-io-dump", tmp_path,
                   "--iter", "1", "--warmup-iter", "0", "--record-comp-seq")
    assert proc.returncode == 0, proc.stderr
    lazy, normal = DumpFolder(tmp_path), DumpFolder(lar_dump("cnn", "default"))
    assert sorted(lazy.ids) == sorted(normal.ids)
    for i in normal.ids:
        np.testing.assert_array_equal(lazy[i].array(), normal[i].array())


@pytest.mark.megengine
def test_input_errors_name_the_problem(manifest, tmp_path):
    fp16, cnn = manifest["fp16"], manifest["cnn"]
    cnn_data = dict(cnn.inputs)["data"]
    line = error_line(run_lar(fp16.model, "--input", f"data:{cnn_data}", "--iter", "1"))
    assert "float32" in line and "float16" in line and "dtype mismatch" in line
    line = error_line(run_lar(cnn.model, "--input", "data:[1,2,3]", "--iter", "1"))
    assert "int32" in line and "float32" in line
    line = error_line(run_lar(cnn.model, "--input", f"nope:{cnn_data}", "--iter", "1"))
    assert "no input named 'nope'" in line and "data" in line
    line = error_line(run_lar(tmp_path / "missing.mge", "--iter", "1"))
    assert "missing.mge does not exist" in line


@pytest.mark.megengine
def test_bn_unfused_dump_fails_with_megengine_message(manifest, tmp_path):
    case = manifest["bn_unfused"]
    proc = run_lar(case.model, "--input", ";".join(case.input_specs()), "--bin-io-dump", tmp_path,
                   "--iter", "1", "--warmup-iter", "0")
    assert proc.returncode == 1
    assert "is_contiguous" in error_line(proc)
    proc = run_lar(case.model, "--input", ";".join(case.input_specs()), "--io-dump", tmp_path / "t.txt",
                   "--iter", "1", "--warmup-iter", "0")
    assert "can not handle dtype Byte" in error_line(proc)


@pytest.mark.megengine
def test_inputs_lite_cannot_feed_fail_in_one_line(manifest, tmp_path):
    """A zero-size input used to end in lite's AssertionError traceback; an absurd shape in a
    MemoryError; a folder as model in "does not exist"."""
    cnn = manifest["cnn"]
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros((0, 3, 32, 32), np.float32))
    line = error_line(run_lar(cnn.model, "--input", f"data:{empty}", "--iter", "1"))
    assert str(empty) in line and "no elements" in line
    line = error_line(run_lar(cnn.model, "--input", "data:{0,3,32,32}", "--iter", "1"))
    assert "no elements" in line
    line = error_line(run_lar(cnn.model, "--input", "data:{99999,99999,99999}", "--iter", "1"))
    assert "{99999,99999,99999}" in line and "at most" in line
    line = error_line(run_lar(tmp_path, "--iter", "1"))
    assert "is a folder" in line
    loop = tmp_path / "loop.mge"
    loop.symlink_to(loop)
    assert "symlink loop" in error_line(run_lar(loop, "--iter", "1"))
