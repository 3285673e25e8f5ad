"""One analysis per --out (issue 53 #2): a rerun replaces the previous analysis instead of
nesting a new one inside it, so ``list``/``node``/``check`` on the folder read the new report;
``--keep-previous`` keeps the old one as OUT.prev, and a run that fails leaves it there. Real
runs of the bundled load_and_run on cnn (and the stand-in that refuses the model, for the
failure)."""
from __future__ import annotations

import json

from proc_helpers import user_lar
from runner_fixtures import lar_prec


def _var(report: dict, name: str) -> dict:
    return next(v for v in report["vars"] if v["name"] == name)


def test_a_rerun_replaces_the_analysis_and_the_folder_reads_the_new_report(manifest, tmp_path):
    cnn = manifest["cnn"]
    out, prev = tmp_path / "nvd", tmp_path / "nvd.prev"
    given = [a for s in cnn.input_specs() for a in ("--input", s)]
    first = lar_prec("naive-vs-default", cnn.model, *given, "--out", out, "--no-local", "-q", timeout=900)
    assert first.returncode == 0, first.stderr
    old = json.loads((out / "report.json").read_text())
    second = lar_prec("naive-vs-default", cnn.model, "--out", out, "--no-local", "-q", "--keep-previous", timeout=900)
    assert second.returncode == 0, second.stderr
    assert "inputs: seeded random, no --input given" in second.stdout + second.stderr
    assert sorted(p.name for p in out.iterdir()) == [".lar-prec-analysis", "default", "inputs", "naive",
                                                     "report.html", "report.json"]  # nothing nested
    new = json.loads((out / "report.json").read_text())
    assert new["input_summary"]["generated"] == ["data"] and old.get("input_summary", {}).get("generated") == []
    assert json.loads((prev / "report.json").read_text()) == old  # --keep-previous
    # the folder's commands read the new analysis: other inputs, other values
    node = lar_prec("node", out, "c2.Convolution", "--json", "-", timeout=300)
    assert node.returncode == 0, node.stderr
    seen = json.loads(node.stdout)["var"]
    assert seen["scale"] == _var(new, "c2.Convolution")["scale"] != _var(old, "c2.Convolution")["scale"]

    # a run that fails: the new folder keeps its failed runs, the previous analysis stays as OUT.prev
    refusing = user_lar(tmp_path / "lar", WRAPPED_LAR_REFUSE="model.mge")
    failed = lar_prec("naive-vs-default", cnn.model, "--out", out, "--no-local", "-q", "--lar", refusing, timeout=900)
    assert failed.returncode == 3, failed.stderr
    assert not (out / "report.json").exists() and json.loads((prev / "report.json").read_text()) == new

    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    refused = lar_prec("naive-vs-default", cnn.model, "--out", other, "-q", timeout=300)
    assert refused.returncode == 2 and refused.stderr.startswith("Error: --out ")
    assert refused.stderr.count("\n") == 1 and sorted(p.name for p in other.iterdir()) == ["notes.txt"]
