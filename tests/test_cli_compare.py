"""Tests of the `lar-prec compare` and `lar-prec tree` commands: exit codes, JSON, formats."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from compare_helpers import GraphDump, computed_float_vars, inject_fault, pick_spread
from lar_prec.cli import cli
from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import dump_file_name

PY = sys.executable


def run(*args: str):
    return CliRunner(mix_stderr=False).invoke(cli, list(args), catch_exceptions=False)


def root_rows(stdout: str) -> list:
    """The cells of each row of the terminal report's Roots table (rank, var id, name, ...)."""
    lines = stdout.splitlines()
    i = next((k for k, line in enumerate(lines) if line.startswith("Roots (")), None)
    if i is None:
        return []
    rows = []
    for line in lines[i + 3:]:  # title, header, rule
        cells = line.split()
        if not cells or not cells[0].isdigit():
            break
        rows.append(cells)
    return rows


@pytest.fixture()
def small(tmp_path):
    """A three-var pair where var 5 diverges (x1.01) and var 7 inherits it."""
    ga, gb = GraphDump(tmp_path / "a"), GraphDump(tmp_path / "b")
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 12)
    for g in (ga, gb):
        g.add(3, x, opr_type="Host2DeviceCopy", name="data")
    ga.add(5, x * 3, inputs=[3])
    gb.add(5, x * 3 * np.float32(1.01), inputs=[3])
    ga.add(7, x * 3 + 1, inputs=[5])
    gb.add(7, x * 3 * np.float32(1.01) + 1, inputs=[5])
    return ga.folder, gb.folder


def test_compare_exit_0_on_equal_folders(small):
    a, _ = small
    r = run("compare", str(a), str(a))
    assert r.exit_code == 0, r.stderr
    assert "no root" in r.stdout and "3 ok" in r.stdout


def test_compare_exit_1_table_names_the_root(small):
    a, b = small
    r = run("compare", str(a), str(b))
    assert r.exit_code == 1
    rows = root_rows(r.stdout)
    assert len(rows) == 1 and rows[0][:3] == ["1", "5", "v5"] and "divergent" in rows[0]
    assert "Threshold: " in r.stdout and "(auto, metric megengine_rel)" in r.stdout


def test_compare_json_stdout_and_file(small, tmp_path):
    a, b = small
    r = run("compare", str(a), str(b), "--json", "-")
    assert r.exit_code == 1
    obj = json.loads(r.stdout)  # only the JSON on stdout
    assert obj["schema"] == "lar-prec.report/1" and obj["command"] == "compare"
    assert [x["id"] for x in obj["roots"]] == [5]
    assert {v["id"]: v["status"] for v in obj["vars"]} == {3: "ok", 5: "divergent", 7: "divergent"}
    out = tmp_path / "r.json"
    r = run("compare", str(a), str(b), "--json", str(out), "--threshold", "0.1")
    assert r.exit_code == 0  # 1% is below a fixed 0.1
    obj = json.loads(out.read_text())
    assert obj["threshold"]["mode"] == "fixed" and obj["threshold"]["value"] == 0.1
    assert obj["roots"] == [] and "no root" in r.stdout


def test_compare_csv(small):
    a, b = small
    r = run("compare", str(a), str(b), "--format", "csv")
    rows = r.stdout.strip().splitlines()
    assert rows[0].startswith("id,name,opr,opr_type,dtype,shape")
    assert len(rows) == 4 and rows[2].split(",")[0] == "5"


def test_compare_megengine_format_feeds_tree(small, tmp_path):
    a, b = small
    r = run("compare", str(a), str(b), "--format", "megengine", "--threshold", "1e-3")
    assert r.exit_code == 1
    assert " not equal: shape=(2, 12) nonequal_idx=" in r.stdout
    diff = tmp_path / "diff.txt"
    diff.write_text(r.stdout)
    t = run("tree", str(diff))
    assert t.exit_code == 1
    assert [row[1] for row in root_rows(t.stdout)] == ["5"]
    j = json.loads(run("tree", str(diff), "--json", "-").stdout)
    assert j["command"] == "tree" and [x["id"] for x in j["roots"]] == [5]
    assert j["threshold"]["value"] is None  # the text does not say which -e was used


def test_bad_input_exit_2_with_one_line(small, tmp_path):
    a, _ = small
    r = run("compare", str(a), str(tmp_path / "nope"))
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and "nope" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    r = run("compare", str(a), str(tmp_path / "empty"))
    assert r.exit_code == 2 and "no binary dump files" in r.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / dump_file_name(3)).write_bytes(b"\x01\x02")
    r = run("compare", str(a), str(bad))
    assert r.exit_code == 2 and "000003" in r.stderr
    r = run("compare", str(a), str(a), "--threshold", "abc")
    assert r.exit_code == 2 and "threshold" in r.stderr
    r = run("compare", str(a), str(a), "--json", str(tmp_path / "no" / "dir.json"))
    assert r.exit_code == 2 and "cannot write" in r.stderr
    r = run("tree", str(tmp_path / "none.txt"))
    assert r.exit_code == 2 and "none.txt" in r.stderr
    tb = tmp_path / "tb.txt"
    tb.write_text("Traceback (most recent call last):\n  File \"x\"\nKeyError: 12\n")
    r = run("tree", str(tb))
    assert r.exit_code == 2 and "KeyError: 12" in r.stderr


def test_tree_exit_0_on_empty_output(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("")
    r = run("tree", str(p))
    assert r.exit_code == 0 and "0 differing" in r.stdout


def test_help_texts():
    for cmd in ("compare", "tree"):
        r = run(cmd, "--help")
        assert r.exit_code == 0 and "Exit code" in r.stdout


@pytest.mark.megengine
def test_cli_on_real_dumps(lar_dump, tmp_path):
    naive, default = Path(lar_dump("cnn", "naive")), Path(lar_dump("cnn", "default"))
    r = subprocess.run([PY, "-m", "lar_prec", "compare", str(naive), str(default), "--json", "-"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["roots"] == [] and all(v["status"] == "ok" for v in obj["vars"])
    victim = pick_spread(computed_float_vars(DumpFolder(default)))[1]
    inject_fault(default, tmp_path / "faulty", victim, 1e-4)
    r = subprocess.run([PY, "-m", "lar_prec", "compare", str(naive), str(tmp_path / "faulty"), "-j", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert root_rows(r.stdout)[0][1] == str(victim)


@pytest.mark.megengine
@pytest.mark.parametrize("fmt", [[], ["--format", "csv"], ["--format", "megengine"], ["--all"]])
def test_control_characters_from_a_dump_never_reach_the_terminal(lar_dump, tmp_path, fmt):
    """Issue 21 §3: a var name holding `ESC ]0;TITLE BEL` or `ESC [2J` would retitle or clear the
    user's terminal; every line (table, verdict, notes, errors) shows them escaped."""
    import shutil

    from lar_prec.dumps.binary import read_binary_dump, write_binary_dump
    from lar_prec.dumps.folder import DumpFolder

    b = tmp_path / "b"
    shutil.copytree(lar_dump("cnn", "default"), b)
    f = DumpFolder(b)
    out_id = [v for v in f.ids if f.var_info(v).name == "Softmax"][0]
    path = b / f"{out_id:06x}"
    d = read_binary_dump(path)
    evil = "Soft\x1b]0;TITLE\x07max\x1b[2J"
    write_binary_dump(path, d.array() * 1.5, d.title.replace("name:Softmax,", f"name:{evil},"), dtype=d.dtype.code)
    for args in (["compare", str(lar_dump("cnn", "naive")), str(b), *fmt],
                 ["compare", str(lar_dump("cnn", "naive")), str(tmp_path / "no\x1b[2Jne")]):
        res = CliRunner(mix_stderr=False).invoke(cli, args, catch_exceptions=False)
        assert res.exit_code in (1, 2), res.stderr
        for stream in (res.stdout, res.stderr):
            assert "\x1b" not in stream and "\x07" not in stream, repr(stream[:500])
        if not fmt or fmt == ["--all"] or "no" in args[-1]:
            assert "\\x1b" in res.stdout + res.stderr  # shown, escaped


@pytest.mark.megengine
def test_verdict_says_why_ok_vars_sit_above_the_threshold(lar_dump, tmp_path):
    """Rounding of a K=4608 convolution above the band (1.5e-5 where the band's top is
    9.5e-6), carried into the add after it: both are held to what their inputs and operator
    explain and stay ok; the verdict, the JSON and the page's legend must not say "all within
    threshold X" above a table with values over X (issue 20 #7)."""
    naive, default = Path(lar_dump("longred", "naive")), Path(lar_dump("longred", "default"))
    conv = next(d.id for d in DumpFolder(default) if d.var.name == "c.Convolution")
    inject_fault(default, tmp_path / "b", conv, 1.5e-5)
    r = run("compare", str(naive), str(tmp_path / "b"), "--json", str(tmp_path / "r.json"))
    assert r.exit_code == 0, r.stdout
    rep = json.loads((tmp_path / "r.json").read_text())
    thr = rep["threshold"]["value"]
    above = [v["name"] for v in rep["vars"] if v["max_err"] is not None and v["max_err"] > thr]
    assert "c.Convolution" in above and all(v["status"] == "ok" for v in rep["vars"])
    assert rep["verdict"].startswith("no divergence: all ") and f"{len(above)} above it carry rounding" in rep["verdict"]
    assert "within threshold " not in rep["verdict"]
    assert rep["verdict"] in r.stdout
