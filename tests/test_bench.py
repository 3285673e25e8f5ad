"""The benchmark harness works (issue 7). No timing assertions: benchmarks are not tests.

Runs a tiny version of ``bench/run.py`` (``--quick``) and checks that it writes a report with
every section and target, and that the tools it times found exactly the divergent variables
the generator planted; plus the generator's files against lar-prec's own dump reader/writer.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lar_prec.dumps.folder import DumpFolder
from lar_prec.dumps.binary import write_binary_dump

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gen  # noqa: E402
import run as bench_run  # noqa: E402


def test_parse_size() -> None:
    assert bench_run.parse_size("1G") == 10**9
    assert bench_run.parse_size("500M") == 500 * 10**6
    assert bench_run.parse_size("4GiB") == 4 << 30
    assert bench_run.parse_size("0") == 0
    assert bench_run.parse_size("none") == 0


@pytest.mark.parametrize("mge_only", [True, False])
def test_generated_pair_reads_back(tmp_path: Path, mge_only: bool) -> None:
    spec = gen.PairSpec(total_bytes=3_000_000, n_vars=50, divergent_share=0.3, megengine_compatible=mge_only,
                        largest_var_bytes=400_000, seed=3)
    info = gen.generate_pair(tmp_path, spec)
    a, b = DumpFolder(info.dir_a), DumpFolder(info.dir_b)
    assert len(a) == len(b) == info.n_vars == 50
    assert info.n_divergent == 15
    assert not a.stray and not b.stray  # MegEngine's script needs dump files only
    sizes = {p.name: p.stat().st_size for p in Path(info.dir_a).iterdir()}
    assert sum(sizes.values()) == info.bytes_a
    assert 0.7 * spec.total_bytes / 2 < info.bytes_a < 1.1 * spec.total_bytes / 2
    dts = {a[v].dtype.name for v in a.ids}
    assert ("Bool" in dts) == (not mge_only)
    assert dts <= {"Float32", "Int32", "Float16", "Uint8", "Int8", "Bool", "Uint16"}
    # the input relation is a DAG over earlier ids, as in a real network
    for v in a.ids:
        assert all(i < v for i in a.inputs_of(v))
    # the streamed writer produces exactly what lar-prec's write_binary_dump produces
    for v in list(a.ids)[:5] + [max(a.ids, key=lambda i: a[i].nbytes)]:
        d = a[v]
        again = write_binary_dump(tmp_path / "again", np.array(d.array()), d.title, d.dtype.code)
        assert again.read_bytes() == d.path.read_bytes()
    # divergent vars differ beyond 1e-3 (MegEngine's metric), clean ones stay below
    div = set(info.divergent_ids)
    for v in a.ids:
        x = a[v].array().astype(np.float64)
        y = b[v].array().astype(np.float64)
        err = float(np.max(np.abs(x - y) / np.maximum(np.maximum(np.abs(x), np.abs(y)), 1.0)))
        assert (err > 1e-3) == (v in div), (v, a[v].dtype.name, err)


@pytest.mark.slow
@pytest.mark.megengine
def test_quick_bench_writes_report(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    raw = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--out", str(out), "--json", str(raw),
         "--data", str(tmp_path / "data")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    for heading in ("# lar-prec benchmark results", "## Machine", "## Targets", "## 1. compare",
                    "## 2. compare: peak memory", "## 2c. where the time goes", "## 3. start-up", "## 4. rooting",
                    "## 5. naive-vs-default"):
        assert heading in text
    assert "CPU:" in text and "numpy" in text and "Quick mode" in text
    res = json.loads(raw.read_text())
    assert len(res["targets"]) == 14
    # the many-variable pair, stage by stage: the stages add up to the total
    prof = res["sections"]["profile-many"]["data"]
    stages = ("start-up", "index", "read", "pairing", "records", "tree", "report", "json")
    assert all(prof[k] >= 0 for k in stages) and abs(sum(prof[k] for k in stages) - prof["total"]) < 1e-9
    assert res["sections"]["memory"]["data"]["cat_s"] > 0
    assert all(t["result"] in ("PASS", "FAIL", "n/a") for t in res["targets"])
    # generated data were cleaned up (no --keep)
    assert not any((tmp_path / "data").iterdir())
    # start-up is always measurable: --help exists from the skeleton on
    st = res["sections"]["startup"]
    assert st["available"] and st["data"]["help_median_s"] > 0
    assert st["data"]["megengine_imported_by"]["--help"] == []
    cmp_ = res["sections"]["compare"]["data"]
    planted = res["pairs"]["main"]["n_divergent"]
    assert planted == cmp_["generated_divergent"] > 0
    if importlib.util.find_spec("megengine") is not None:
        # MegEngine's script prints one "not equal" per divergent variable, exactly the planted ones
        assert cmp_["megengine"]["divergent_found"] == planted
        assert cmp_["megengine"]["median_s"] > 0
    if "lar-prec" in cmp_:
        assert cmp_["lar-prec"]["divergent_found"] == planted
        assert cmp_["lar-prec"]["returncodes"] == [1]  # divergence found
        # what a user at a terminal gets is measured too, with the same result
        assert cmp_["lar-prec, terminal"]["divergent_found"] == planted
        assert cmp_["lar-prec, terminal"]["returncodes"] == [1]
        mem = res["sections"]["memory"]["data"]
        assert mem["divergent_found"] == mem["generated_divergent"]
        assert mem["peak_mb"] > 0
        many = res["sections"]["many"]["data"]
        assert many["lar-prec"]["divergent_found"] == many["generated_divergent"] > 0
    root = res["sections"]["rooting"]
    if root["available"]:
        # the two stretches where divergence starts are exactly the roots
        assert root["data"]["root_ids"] == root["data"]["expected_roots"]
        chain = root["data"]["chain"]  # the path to the deep chain's root is the whole chain
        assert chain["root"] == chain["depth"] == chain["path_len"] > 0
    nvd = res["sections"]["naive-vs-default"]
    if nvd["available"]:
        assert {row["mode"] for row in nvd["data"]["rows"]} == {"pipe", "terminal"}
        for row in nvd["data"]["rows"]:
            assert row["rc"] in (0, 1), row["stderr_tail"]
            assert len(row["run_seconds"]) == 2  # the naive and the default run
            # every load_and_run process is run time: the two runs and local error's layerwise runs
            assert row["analysis_s"] == pytest.approx(row["wall_s"] - sum(row["run_seconds"])
                                                      - sum(row["local_run_seconds"]))


@pytest.mark.megengine
def test_dump_roots_bench_writes_its_table(tmp_path: Path) -> None:
    """bench/dump_roots.py on one small case: real runs, a clean pair without a false root and
    every 1e-3 fault found (the script asserts nothing; this proves it runs and counts)."""
    out = tmp_path / "R.md"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "dump_roots.py"), "--cases", "mlp", "--sites", "3",
                           "--sizes", "1e-3", "--no-winograd", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln for ln in out.read_text().splitlines() if ln.startswith("| mlp |")]
    assert [r.split(" | ")[1] for r in rows] == ["default", "reproducible", "fast-run"]
    assert all(r.split(" | ")[2] == "0" and r.split(" | ")[4] == "3/3 |" for r in rows), rows


@pytest.mark.megengine
def test_mixed_bench_writes_its_table(tmp_path: Path) -> None:
    """bench/mixed.py on one small case: real mixed and sweep runs, counted and tabled."""
    out = tmp_path / "RESULTS-mixed.md"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "mixed.py"), "--cases", "mlp", "--repeat", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln for ln in out.read_text().splitlines() if ln.startswith("| mlp | ioc16 |")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[2] in ("within", "fixed", "not_fixed")
    assert int(cells[7].split()[0]) >= 2 and int(cells[8].split()[0]) >= 2  # model runs of mixed and sweep
