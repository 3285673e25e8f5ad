"""``--store`` on the analysis commands test_store.py does not run (shake, sweep, devices, mixed,
quant): each through the real command line on a small case, cheapest settings. The command writes
one run row and its operator rows; a second sample of the same analysis (its summary again, later)
checks against the first with exit 0, so the rows pair by key and judge as equal."""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from lar_prec.store.db import open_store, run_summary_of
from lar_prec.store.summary import Summary

pytestmark = pytest.mark.megengine


def _case_args(manifest, name, quiet=True):
    c = manifest[name]
    return [str(c.model), "--input", ";".join(c.input_specs()), *(["-q"] if quiet else [])]


#: argv after the command and the exit code each gives here (quant: the int8 MobileNetV2 whose
#: projection is mis-scaled, one layer to keep in float)
COMMANDS = {
    "shake": (lambda m: [*_case_args(m, "cnn"), "--repeat", "2", "--no-explain"], 0),
    "sweep": (lambda m: [*_case_args(m, "cnn"), "--options", "fuse-preprocess", "--no-local", "--speed-runs", "0"], 0),
    "devices": (lambda m: [*_case_args(m, "cnn"), "--local", "--no-local"], 0),
    "mixed": (lambda m: [*_case_args(m, "mlp"), "--tolerance", "0.5"], 0),
    "quant": (lambda m: [m["mbv2_float"].model, *_case_args(m, "mbv2_int8_proj", quiet=False)], 1),
}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "LAR_PREC_STORE": ""})


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_command_writes_its_run_and_operators_and_checks_against_itself(command, manifest, tmp_path):
    make_argv, code = COMMANDS[command]
    db = tmp_path / "results.db"
    p = _cli(command, *make_argv(manifest), "--out", tmp_path / "a", "--store", db)
    assert p.returncode == code, p.stderr
    with open_store(str(db)) as st:
        [run] = st.runs()
        ops = st.ops(run["id"])
        assert run["command"] == command and run["exit_code"] == code and run["model_sha256"]
        assert run["analysis_dir"] and os.path.isdir(run["analysis_dir"])
        assert ops and len({(o.part, o.op_key) for o in ops}) == len(ops)  # one row per operator output
        assert any(o.max_err is not None or o.local_err is not None for o in ops)
        if command == "sweep":  # the option's own rows next to the plain comparison's
            assert {o.part for o in ops} == {"", "fuse-preprocess"}
        if command == "quant":  # the layer to keep in float, by its int8 name
            assert [o.name for o in ops if o.status == "divergent"] == ["features.5.conv.2.ConvBias"]
        later = (datetime.datetime.fromisoformat(run["created"]) + datetime.timedelta(seconds=1)).isoformat()
        again = dataclasses.replace(run_summary_of(run), uid="f" * 32, created=later)
        st.write(Summary(again, tuple(ops)))
    c = _cli("check", "--store", db, "--json", "-")
    assert c.returncode == 0, c.stdout + c.stderr
    res = json.loads(c.stdout)
    assert res["history_runs"] == 1 and res["run"]["uid"] == "f" * 32
    assert res["regressed"] == [] and res["improved"] == []
