"""The bundled load_and_run's --bin-out-dump: the network outputs only, one file per execution
(shake's observer check runs a model with it and no --bin-io-dump)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from lar_prec.dumps.binary import read_binary_dump
from lar_prec.dumps.folder import DumpFolder

pytestmark = pytest.mark.megengine


def test_bundled_runner_dumps_outputs_only(manifest, tmp_path):
    case = manifest["cnn"]
    out, full = tmp_path / "out", tmp_path / "full"
    out.mkdir()
    full.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for flag, d in (("--bin-out-dump", out), ("--bin-io-dump", full)):
        subprocess.run([sys.executable, "-m", "lar_prec.lar", str(case.model), "--input", case.input_specs()[0],
                        flag, str(d), "--iter", "2", "--warmup-iter", "1"], cwd=ROOT, env=env, check=True,
                       capture_output=True)
    assert sorted(p.name for p in out.iterdir()) == ["run0-out0", "run1-out0", "run2-out0"]
    folder = DumpFolder(full)
    last = read_binary_dump(out / "run2-out0")
    name = "Softmax"
    vid = next(v for v in folder.files() if folder.var_info(v).name == name)
    assert f"name:{name}," in last.title
    assert np.array_equal(np.asarray(last.array()), np.asarray(folder[vid].array()))


def test_bin_out_dump_with_another_dump_is_refused(manifest, tmp_path):
    case = manifest["cnn"]
    proc = subprocess.run([sys.executable, "-m", "lar_prec.lar", str(case.model), "--input", case.input_specs()[0],
                           "--bin-out-dump", str(tmp_path), "--bin-io-dump", str(tmp_path / "d")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert proc.returncode == 1 and "--bin_out_dump and --io_dump/--bin_io_dump" in proc.stderr
