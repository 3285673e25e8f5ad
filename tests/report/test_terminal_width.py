"""A terminal that fits 100 columns (issue 53): a real compare of cnn's naive and default dumps
printed into a pipe keeps every table within 100 columns by leaving out its optional columns
(named under the table; ``--wide`` prints them), the threshold's rule is one line (``--explain``
and the JSON have it whole), notes fold; every command takes ``--wide``, ``--explain``,
``-v/--verbose`` and ``-q/--quiet``; shake's repeats are one progress counter over all its runs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "LAR_PREC_STORE": "", "COLUMNS": "300"})


def test_a_compare_fits_100_columns_and_wide_and_explain_give_the_rest(lar_dump, tmp_path):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    p = _cli("compare", ref, clean, "--json", tmp_path / "r.json")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert all(len(ln) <= 100 for ln in lines), max(lines, key=len)
    report = json.loads((tmp_path / "r.json").read_text())
    reason = report["threshold"]["reason"]
    [th] = [ln for ln in lines if ln.startswith("Threshold: ")]
    assert len(reason) > 100 and th.endswith("[--explain]") and reason not in th
    heads = next(ln for ln in lines if ln.lstrip().startswith("#") and "max_err" in ln).split()
    assert "cosine" not in heads and "max_err" in heads
    assert any(ln.strip().startswith("(left out to fit: ") and "cosine" in ln for ln in lines)

    wide = _cli("compare", ref, clean, "--wide", "--explain")
    assert wide.returncode == 0, wide.stderr
    assert any(ln.endswith(reason) for ln in wide.stdout.splitlines())  # the whole rule, as in the JSON
    heads = next(ln for ln in wide.stdout.splitlines() if ln.lstrip().startswith("#") and "max_err" in ln).split()
    assert "cosine" in heads and "max_abs_err" in heads
    # the values the wide table shows are the JSON's
    top = max(report["vars"], key=lambda v: v["max_err"] or 0)
    row = next(ln for ln in wide.stdout.splitlines() if re.match(rf"\s*\d+\s+{top['id']}\s+{re.escape(top['name'])}\b", ln))
    assert f"{top['cosine']:.6f}" in row


def test_every_command_takes_the_view_options():
    from lar_prec.cli import cli

    def commands(group):
        for name, c in group.commands.items():
            yield from commands(c) if hasattr(c, "commands") else [(name, c)]

    found = list(commands(cli))
    assert len(found) >= 20
    for name, c in found:
        opts = {o for p in c.params for o in getattr(p, "opts", ())}
        assert {"-q", "--quiet", "-v", "--verbose", "--wide", "--explain"} <= opts, name


@pytest.mark.megengine
def test_shake_counts_all_its_runs_on_one_counter(manifest, tmp_path):
    c = manifest["cnn"]
    p = _cli("shake", c.model, "--input", ";".join(c.input_specs()), "--repeat", "3", "--no-explain", "--no-local",
             "--out", tmp_path / "s")
    assert p.returncode in (0, 1), p.stderr
    counted = re.findall(r"load_and_run runs (\d+)/(\d+):", p.stderr)
    assert counted == [("1", "3"), ("2", "3"), ("3", "3")], p.stderr
    assert all(len(ln) <= 100 for ln in p.stdout.splitlines()), max(p.stdout.splitlines(), key=len)


def _on_a_terminal(args, env):
    """The command's stdout written to a pseudo-terminal (rich's console), as bytes."""
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, stdout=slave,
                                stderr=subprocess.DEVNULL, env=env)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command closed its end
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=300)
    finally:
        os.close(master)
    return b"".join(chunks)


def test_no_color_turns_the_colours_off_on_a_terminal(lar_dump):
    ref, clean = lar_dump("cnn", "naive"), lar_dump("cnn", "default")
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(TERM="xterm-256color", COLORTERM="truecolor", LAR_PREC_STORE="")
    colour = re.compile(rb"\x1b\[[0-9;]*(?:3[0-7]|38;[0-9;]+)m")
    coloured = _on_a_terminal(["compare", ref, clean], env)
    plain = _on_a_terminal(["compare", ref, clean], {**env, "NO_COLOR": "1"})
    assert b"Verdict: " in coloured and b"Verdict: " in plain
    assert colour.search(coloured) and not colour.search(plain)
