#!/usr/bin/env python
"""Where the time of ``lar-prec compare`` goes on a pair of many small variables, per stage
(issue 24): each stage timed in this process, in the order the command runs them.

    .venv/bin/python bench/profile_many.py DIR_A DIR_B [--threshold 1e-3] [--repeat 3] [--json OUT]

Stages: index (list both folders), pairing (every header and title read, names checked,
execution order), measure (plan, read and compare every pair, judge: ``compare_folders``
less its own pairing), tree (the variable tree and its roots), report (the Report model),
JSON (the report written). Start-up (interpreter and imports) is what ``python -c "import
lar_prec.cli"`` costs, timed as a child process. Prints one JSON object; medians of ``--repeat``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def once(a: str, b: str, threshold: str, out: Path) -> dict:
    from lar_prec.compare.folders import compare_folders
    from lar_prec.compare.pairing import pair_folders
    from lar_prec.diagnosis.tree import VarTree
    from lar_prec.dumps.folder import DumpFolder
    from lar_prec.report.model import from_tree, write_json

    t = {}
    t0 = time.perf_counter()
    fa, fb = DumpFolder(a), DumpFolder(b)
    t1 = time.perf_counter()
    pair_folders(fa, fb, "auto")
    t2 = time.perf_counter()
    cmp = compare_folders(a, b, threshold=float(threshold), jobs=None, pairing="auto")
    t3 = time.perf_counter()
    tree = VarTree.from_comparison(cmp)
    tree.roots()
    t4 = time.perf_counter()
    report = from_tree(tree, command="compare", lazy_vars=True, max_paths=50)
    t5 = time.perf_counter()
    write_json(report, out)
    t6 = time.perf_counter()
    t["index"] = t1 - t0
    t["pairing"] = t2 - t1
    t["measure"] = max(0.0, (t3 - t2) - (t2 - t0))  # compare_folders indexes and pairs again
    t["tree"] = t4 - t3
    t["report"] = t5 - t4
    t["json"] = t6 - t5
    t["n_vars"] = len(cmp.diffs)
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir_a")
    ap.add_argument("dir_b")
    ap.add_argument("--threshold", default="1e-3")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    starts = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import lar_prec.cli"], cwd=ROOT, check=True)
        starts.append(time.perf_counter() - t0)
    runs = []
    with tempfile.TemporaryDirectory(prefix="lar-prec-profile-many-") as tmp:
        once(a.dir_a, a.dir_b, a.threshold, Path(tmp) / "warm.json")  # warm page cache and imports
        for k in range(a.repeat):
            runs.append(once(a.dir_a, a.dir_b, a.threshold, Path(tmp) / f"r{k}.json"))
    stages = ["index", "pairing", "measure", "tree", "report", "json"]
    res = {"start-up": statistics.median(starts)}
    res.update({s: statistics.median(r[s] for r in runs) for s in stages})
    res["n_vars"] = runs[0]["n_vars"]
    res["total"] = sum(res[s] for s in ["start-up"] + stages)
    text = json.dumps(res)
    if a.json:
        Path(a.json).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
