#!/usr/bin/env python
"""Where the time of ``lar-prec compare`` goes on a pair of many small variables, per stage
(issue 24): each stage timed in this process, in the order the command runs them.

    .venv/bin/python bench/profile_many.py DIR_A DIR_B [--threshold 1e-3] [--repeat 3] [--json OUT]

Stages: index (list both folders), read (the batch reader: every pair of files read once,
headers, titles and small vars' values compared, in C on threads, then filed), pairing (names
checked, execution order), records (the rest of ``compare_folders``: each var's record made
and judged, what the batch reader left measured), tree (the variable tree and its roots),
report (the Report model), JSON (the report written). Start-up (interpreter and imports) is what ``python -c "import
lar_prec.cli"`` costs, timed as a child process. Prints one JSON object; medians of ``--repeat``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def once(a: str, b: str, threshold: str, out: Path) -> dict:
    import gc

    from lar_prec.compare.engine import batch
    from lar_prec.compare.folders import compare_folders
    from lar_prec.compare.pairing import pair_folders
    from lar_prec.compare.threshold import parse_threshold
    from lar_prec.diagnosis.tree import VarTree
    from lar_prec.dumps.folder import DumpFolder
    from lar_prec.report.model import from_tree, write_json

    # as the command runs: the collector tuned as cli.main does for compare
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    t = {}
    t0 = time.perf_counter()
    fa, fb = DumpFolder(a), DumpFolder(b)
    t1 = time.perf_counter()
    if batch.available():
        batch.prefetch(fa, fb, 1 << 15, parse_threshold(threshold), min(8, os.cpu_count() or 1))
    t2 = time.perf_counter()
    pair_folders(fa, fb, "auto")
    t3 = time.perf_counter()
    cmp = compare_folders(a, b, threshold=threshold, jobs=None, pairing="auto")
    t4 = time.perf_counter()
    tree = VarTree.from_comparison(cmp)
    tree.roots()
    t5 = time.perf_counter()
    report = from_tree(tree, command="compare", lazy_vars=True, max_paths=50)
    t6 = time.perf_counter()
    write_json(report, out)
    t7 = time.perf_counter()
    t["index"] = t1 - t0
    t["read"] = t2 - t1
    t["pairing"] = t3 - t2
    # compare_folders indexes, reads and pairs again: the rest of it is the records
    t["records"] = max(0.0, (t4 - t3) - (t3 - t0))
    t["tree"] = t5 - t4
    t["report"] = t6 - t5
    t["json"] = t7 - t6
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
    stages = ["index", "read", "pairing", "records", "tree", "report", "json"]
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
