"""``lar-prec list`` and ``lar-prec node`` over real reports, and the module of a root (issue 40
#4, #5): a fault injected into real mobilenetv3 dumps at a depthwise convolution MegEngine
named after the previous block."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from compare_helpers import inject_fault
from conftest import ROOT
from lar_prec.dumps.folder import DumpFolder


def lar_prec(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lar_prec", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def report(lar_dump, tmp_path_factory):
    """compare of mobilenetv3 naive against default with a fault at the convolution named
    ``conv(blocks.2.ADD,...)`` (blocks.3's expansion: its bias and activation are blocks.3's)."""
    naive = lar_dump("mobilenetv3", "naive")
    f = DumpFolder(naive)
    victim = next(v for v in f.ids if f[v].var.name.startswith("conv(blocks.2.ADD,"))
    d = tmp_path_factory.mktemp("triage")
    inject_fault(lar_dump("mobilenetv3", "default"), d / "b", victim, 1e-3)
    proc = lar_prec("compare", naive, d / "b", "--json", d / "report.json")
    assert proc.returncode == 1, proc.stderr
    return d, victim, proc.stdout


@pytest.mark.megengine
def test_the_root_is_placed_in_its_own_module_not_its_inputs(report):
    d, victim, stdout = report
    rep = json.loads((d / "report.json").read_text())
    root = rep["roots"][0]
    assert root["id"] == victim and root["module"] == "blocks.3"
    assert root["module_how"].startswith("its consumer blocks.3.")
    assert "in module blocks.3" in stdout and "not blocks.2: its name is made from its input blocks.2.ADD" in stdout


@pytest.mark.megengine
def test_list_triages_by_cosine_status_and_operator_type(report):
    d, victim, _ = report
    rep = json.loads((d / "report.json").read_text())
    proc = lar_prec("list", d / "report.json", "--status", "divergent", "--opr-type", "Conv*", "--sort", "error",
                    "--json", "-")
    got = json.loads(proc.stdout)
    want = [v for v in rep["vars"] if v["status"] == "divergent" and v["opr_type"].startswith("Conv")]
    assert proc.returncode == 0 and got["n_matched"] == len(want) > 1 and got["n_vars"] == len(rep["vars"])
    errs = [v["norm_err"] for v in got["vars"]]
    assert errs == sorted(errs, reverse=True) and victim in [v["id"] for v in got["vars"]]
    # cosine: what precision_tool's vcs -c lists; a bound none is under lists none
    every = sorted({v["cosine"] for v in rep["vars"] if v["cosine"] is not None})
    bound = every[len(every) // 2]
    below = lar_prec("list", d / "report.json", "--cosine-below", repr(bound), "--sort", "cosine", "--json", "-")
    cos = [v["cosine"] for v in json.loads(below.stdout)["vars"]]
    assert cos == sorted(cos) and len(cos) == sum(1 for v in rep["vars"] if (v["cosine"] or 1) < bound) > 0
    none = lar_prec("list", d / "report.json", "--cosine-below", 0)
    assert none.returncode == 0 and "no variable of" in none.stdout
    table = lar_prec("list", d, "--not-ok", "--top", "3")  # a folder: its report.json
    n_bad = rep["summary"]["n_not_ok"]
    assert table.returncode == 0 and f"{n_bad} of {len(rep['vars'])} variables" in table.stdout
    assert f"... {n_bad - 3} more" in table.stdout
    bad = lar_prec("list", d / "report.json", "--status", "wrong")
    assert bad.returncode == 2 and "unknown status 'wrong'" in bad.stderr


@pytest.mark.megengine
def test_node_shows_the_neighbourhood_with_statistics(report):
    d, victim, _ = report
    proc = lar_prec("node", d / "report.json", victim, "--depth", "2", "--json", "-")
    view = json.loads(proc.stdout)
    assert proc.returncode == 0 and view["var"]["id"] == victim and view["root_rank"] == 1
    assert {v["depth"] for v in view["inputs"]} == {1, 2} and view["consumers"]
    assert all("err_p99" in v and "within_share" in v and "status" in v for v in view["inputs"] + view["consumers"])
    text = lar_prec("node", d / "report.json", victim)
    assert text.returncode == 0 and "Consumers (to depth 1)" in text.stdout and "p99.9" in text.stdout
    assert lar_prec("node", d / "report.json", "no such var").returncode == 2
