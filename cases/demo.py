"""What ``make demo`` runs: lar-prec's main job on one real case, then a small zoo.

``python -m cases.demo --out DIR``: naive-vs-default on the resnet case, report on the terminal,
analysis folder (runs, dumps, report.json, report.html) under DIR; then ``lar-prec zoo
cases/zoo.toml`` into the store DIR/zoo.db (a second ``make demo`` finds its tasks there and runs
none; ``--no-zoo`` skips it).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from cases import load_manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--case", default="resnet")
    ap.add_argument("--no-zoo", action="store_true", help="only the one analysis")
    args = ap.parse_args(argv)
    case = load_manifest()[args.case]
    args.out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "lar_prec", "naive-vs-default", str(case.model)]
    for spec in case.input_specs():
        cmd += ["--input", spec]
    cmd += ["--out", str(args.out)]
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    # 0 (no divergence) and 1 (divergence found) are both successful analyses.
    if rc not in (0, 1) or args.no_zoo:
        return 0 if rc in (0, 1) else rc
    zoo = [sys.executable, "-m", "lar_prec", "zoo", str(Path(__file__).with_name("zoo.toml")),
           "--store", str(args.out / "zoo.db"), "--out", str(args.out / "zoo")]
    print("$ " + " ".join(zoo), flush=True)
    rc = subprocess.call(zoo)
    return 0 if rc in (0, 1) else rc


if __name__ == "__main__":
    sys.exit(main())
