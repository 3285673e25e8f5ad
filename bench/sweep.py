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
import sys
import tempfile
from pathlib import Path

from harness import BUILD, LAR_MODULE, Table, cases, input_args, timed, write

DEFAULT_OPTIONS = "weight-preprocess,const-shape,record-comp-seq,nhwcd4,ioc16,fuse-conv-bias-nonlinearity"
TARGET = 0.20


def one(case, options: str, jobs: int, timeout: float, tmp: Path) -> dict:
    out = tmp / case.name
    argv = [*LAR_MODULE, "sweep", str(case.model), "--options", options, "-j", str(jobs), "--timeout", str(timeout),
            "--out", str(out), "--json", str(out) + ".json", "-q", *input_args(case)]
    proc = timed(argv, timeout=timeout * 20)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sweep on {case.name} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    wall = proc.seconds
    d = json.loads(Path(str(out) + ".json").read_text())
    runs = sum(r["seconds"] for r in d["runs"])
    inner = d["timing"]["analysis_seconds"]
    around = max(0.0, wall - d["timing"]["wall_seconds"])
    return {"case": case.name, "runs": len(d["runs"]), "run_seconds": runs, "analysis_inner": inner,
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
    ap.add_argument("--build", default=str(BUILD), help="built cases (manifest.json)")
    ap.add_argument("--out", default=None, help="also write the table here (Markdown)")
    a = ap.parse_args()
    manifest = cases(Path(a.build))
    rows = []
    with tempfile.TemporaryDirectory(prefix="lar-prec-bench-sweep-") as tmp:
        for name in a.cases.split(","):
            r = one(manifest[name], a.options, a.jobs, a.timeout, Path(tmp))
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
        table = Table("case", "runs", "run s (summed)", "analysis s (loop)", "start-up+report s", "ratio", "target",
                      "local error s", "local / runs", "local not measured")
        for r in rows:
            table.row(r["case"], r["runs"], f"{r['run_seconds']:.2f}", f"{r['analysis_inner']:.2f}", f"{r['around']:.2f}",
                      f"{r['ratio']:.1%}", f"<= {TARGET:.0%}", f"{r['local_seconds']:.2f}", f"{r['local_ratio']:.1%}",
                      ", ".join(r["local_unmeasured"]) or "-")
        lines = ["# sweep benchmark", "", f"options: `{a.options}`, -j {a.jobs}, python {sys.version.split()[0]}", "",
                 *table.lines(), "", f"{verdict}: worst {worst:.1%}", ""]
        write(Path(a.out), "\n".join(lines), show=False)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
