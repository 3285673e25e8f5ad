#!/usr/bin/env python
"""Sweep benchmark (issue 13): the analysis of `lar-prec sweep` against its load_and_run runs.

For each case, runs `python -m lar_prec sweep CASE --options LIST -j JOBS --json F` once and
reads from the report:

* runs: the summed wall time of every load_and_run process of the sweep (``runs[].seconds``);
* analysis: time the sweep spent outside load_and_run: pairing by name, relayout, comparing,
  rooting (``timing.analysis_seconds``, measured inside the process), plus everything the
  process did around the sweep loop (start-up, input preparation, report writing) = process
  wall time - ``timing.wall_seconds`` (an upper bound: it includes interpreter start-up);
* ratio = analysis / runs, target <= 0.20;
* local error (issue 14): seconds spent building the layerwise model once and running it under
  each option that ran (``timing.local_seconds``), as a share of the runs. It is reported, not
  judged: it costs about one more run per option by design (``--no-local`` turns it off).

Usage:
    .venv/bin/python bench/sweep.py [--cases cnn,resnet] [--options LIST] [-j 2] [--out FILE]
Prints one line per case and a final PASS/FAIL line; --out also writes them as Markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OPTIONS = "weight-preprocess,const-shape,record-comp-seq,nhwcd4,ioc16,fuse-conv-bias-nonlinearity"
TARGET = 0.20


def one(case: dict, build: Path, options: str, jobs: int, timeout: float, tmp: Path) -> dict:
    out = tmp / case["name"]
    argv = [sys.executable, "-m", "lar_prec", "sweep", str(build / case["model"]), "--options", options,
            "-j", str(jobs), "--timeout", str(timeout), "--out", str(out), "--json", str(out) + ".json", "-q"]
    for spec in case["inputs"]:
        name, _, path = spec.partition(":")
        argv += ["--input", f"{name}:{build / path}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout * 20)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sweep on {case['name']} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    d = json.loads(Path(str(out) + ".json").read_text())
    runs = sum(r["seconds"] for r in d["runs"])
    inner = d["timing"]["analysis_seconds"]
    around = max(0.0, wall - d["timing"]["wall_seconds"])
    return {"case": case["name"], "runs": len(d["runs"]), "run_seconds": runs, "analysis_inner": inner,
            "around": around, "wall": wall, "ratio_inner": inner / runs, "ratio": (inner + around) / runs,
            "diverging": [o["option"] for o in d["options"] if o["verdict"] == "diverges"],
            "local_seconds": d["timing"].get("local_seconds") or 0.0,
            "local_ratio": (d["timing"].get("local_seconds") or 0.0) / runs,
            "local_unmeasured": [o["option"] for o in d["options"]
                                 if o.get("local") and not o["local"]["measured"]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="cnn,resnet,mlp", help="comma-separated case names [cnn,resnet,mlp]")
    ap.add_argument("--options", default=DEFAULT_OPTIONS, help=f"sweep --options [{DEFAULT_OPTIONS}]")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--build", default=str(ROOT / "cases" / "build"), help="built cases (manifest.json)")
    ap.add_argument("--out", default=None, help="also write the table here (Markdown)")
    a = ap.parse_args()
    build = Path(a.build)
    manifest = {c["name"]: c for c in json.loads((build / "manifest.json").read_text())["cases"]}
    rows = []
    with tempfile.TemporaryDirectory(prefix="lar-prec-bench-sweep-") as tmp:
        for name in a.cases.split(","):
            r = one(manifest[name], build, a.options, a.jobs, a.timeout, Path(tmp))
            rows.append(r)
            print(f"{r['case']:10s} runs {r['runs']:2d} = {r['run_seconds']:6.2f} s   analysis {r['analysis_inner']:5.2f} s"
                  f" (+{r['around']:.2f} s start-up/report) = {r['ratio']:.1%} of the runs"
                  f" (sweep loop alone {r['ratio_inner']:.1%})   local error {r['local_seconds']:.2f} s"
                  f" = {r['local_ratio']:.1%} of the runs"
                  f"{' (not measured: ' + ','.join(r['local_unmeasured']) + ')' if r['local_unmeasured'] else ''}"
                  f"   diverging: {','.join(r['diverging']) or '-'}", flush=True)
    worst = max(r["ratio"] for r in rows)
    verdict = "PASS" if worst <= TARGET else "FAIL"
    print(f"{verdict}: worst analysis/run ratio {worst:.1%} (target <= {TARGET:.0%})")
    if a.out:
        lines = ["# sweep benchmark", "", f"options: `{a.options}`, -j {a.jobs}, python {sys.version.split()[0]}", "",
                 "| case | runs | run s (summed) | analysis s (loop) | start-up+report s | ratio | target "
                 "| local error s | local / runs | local not measured |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['case']} | {r['runs']} | {r['run_seconds']:.2f} | {r['analysis_inner']:.2f} | {r['around']:.2f} "
                  f"| {r['ratio']:.1%} | <= {TARGET:.0%} | {r['local_seconds']:.2f} | {r['local_ratio']:.1%} "
                  f"| {', '.join(r['local_unmeasured']) or '-'} |" for r in rows]
        lines += ["", f"{verdict}: worst {worst:.1%}", ""]
        Path(a.out).write_text("\n".join(lines))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
