"""An option whose dump has another run's bits takes that run's local error (issue 55 #3), on
real runs of the cases.

The stand-in load_and_run (tests/wrapped_lar.py, the bundled one really run) makes it hold on
every CPU: ``WRAPPED_LAR_FLAG_AS`` builds a binary where ``--const-shape`` does nothing (its
runs are the default run's, bit for bit) and ``--enable-nchw44-dot`` is ``--enable-nchw44``;
``WRAPPED_LAR_FAULT_IF_FLAG`` one where ``--weight-preprocess`` gets c2 wrong. The test checks
the bits itself (numpy, var by var) before it checks what the sweep did with them.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from proc_helpers import user_lar

from lar_prec.compare.namepair import skip_reason
from lar_prec.dumps.binary import read_binary_dump, write_binary_dump
from lar_prec.dumps.folder import DumpFolder
from lar_prec.workflows.sweep.samebits import DumpPrint, same_bits
from test_sweep import by_option, sweep_json


def _values(run_dir: str) -> dict:
    """name -> sorted (dtype, shape, bytes) of every var a run dumped."""
    out: dict = {}
    for d in DumpFolder(Path(run_dir) / "dump"):
        out.setdefault(d.var.name, []).append((d.dtype.name, tuple(d.shape), d.raw()))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.megengine
def test_an_option_with_the_default_runs_bits_takes_its_local_error_and_a_wrong_one_gets_its_own(manifest, tmp_path):
    lar = user_lar(tmp_path / "lar", WRAPPED_LAR_FLAG_AS="--const-shape=,--enable-nchw44-dot=--enable-nchw44",
                   WRAPPED_LAR_FAULT_IF_FLAG="--weight-preprocess=c2.weight:1e-2")
    d, res = sweep_json(tmp_path, manifest["cnn"], ["const-shape", "weight-preprocess", "nchw44", "nchw44-dot"],
                        "--lar", str(lar), "-j", "2", expect=1)
    plain, opts = d["default"], by_option(d)
    cs, wp, n44, dot = (opts[k] for k in ("const-shape", "weight-preprocess", "nchw44", "nchw44-dot"))
    assert all(o["status"] == "runs" for o in (plain, cs, wp, n44, dot))
    # the bits, seen here: const-shape is the default run; nchw44-dot is nchw44; the faulty option is neither
    assert _values(cs["run_dir"]) == _values(plain["run_dir"])
    assert _values(dot["run_dir"]) == _values(n44["run_dir"]) != _values(plain["run_dir"])
    assert _values(wp["run_dir"]) != _values(plain["run_dir"])

    local = tmp_path / "a" / "local"
    # the same bits as the default run: no layerwise run of its own, the default run's local error
    assert cs["local"]["same_bits_as"] == "default" and not (local / "const-shape").exists()
    assert cs["local"]["same_words"] == "same bits as the default run: local error taken from it"
    assert cs["local"]["dir"] == plain["local"]["dir"] and cs["local"]["roots"] == plain["local"]["roots"]
    assert cs["local"]["seconds"] == 0 and cs["local"]["n_measured"] == plain["local"]["n_measured"] > 0
    assert cs["verdict"] == ("ok" if plain["verdict"] == "ok" else "as_default") and cs["output_err"] == plain["output_err"]
    # two options with the same bits share one layerwise run: the first one's
    assert n44["local"]["same_bits_as"] is None and (local / "nchw44").is_dir() and not (local / "nchw44-dot").exists()
    assert dot["local"]["same_bits_as"] == "nchw44" and dot["local"]["roots"] == n44["local"]["roots"]
    assert dot["verdict"] == n44["verdict"] and dot["local"]["same_words"] == "same bits as nchw44: local error taken from it"
    # the faulty option has its own layerwise run, and is caught there
    assert wp["local"]["same_bits_as"] is None and (local / "weight-preprocess").is_dir()
    assert wp["verdict"] == "diverges" and wp["root_rule"] == "local" and wp["root"]["name"].startswith("c2.")
    assert plain["local"]["same_bits_as"] is None
    # the row says it in words, in the terminal and the page's data
    words = " ".join(res.stdout.split())
    assert "same bits as the default run: local error taken from it" in words
    assert "same bits as nchw44: local error taken from it" in words
    # local error's seconds are counted once
    assert d["timing"]["local_seconds"] >= n44["local"]["seconds"] + wp["local"]["seconds"] + plain["local"]["seconds"]


@pytest.mark.megengine
def test_same_bits_tells_a_changed_byte_a_missing_var_and_an_extra_computed_var(lar_dump, tmp_path):
    src = lar_dump("cnn")
    same = tmp_path / "same"
    shutil.copytree(src, same)
    assert same_bits(DumpPrint(src), DumpPrint(same)) == ""
    folder = DumpFolder(src)
    computed = [d for d in folder if not skip_reason(d.var)]
    last = computed[-1]

    flipped = tmp_path / "flipped"
    shutil.copytree(src, flipped)
    values = np.array(last.array(), copy=True)
    k = values.size // 2
    values.flat[k] = np.nextafter(values.flat[k], values.dtype.type(np.inf))  # one ulp, one element
    assert values.flat[k] != last.array().flat[k]
    write_binary_dump(Path(flipped) / Path(last.file).name, values, last.title, last.dtype.name)
    assert read_binary_dump(Path(flipped) / Path(last.file).name).title == last.title
    assert same_bits(DumpPrint(src), DumpPrint(flipped)) == f"{last.var.name}: its values differ"

    missing = tmp_path / "missing"
    shutil.copytree(src, missing)
    (missing / Path(last.file).name).unlink()
    assert "dumped in one run only" in same_bits(DumpPrint(src), DumpPrint(missing))
    # the other way round, the option has a computed var the default run has not
    assert same_bits(DumpPrint(missing), DumpPrint(src)) == f"{last.var.name} is computed in one run only"
