#!/usr/bin/env python
"""Zoo benchmark (issue 37 #7): a zoo of the cases x 4 options x 2 configurations
(naive-vs-default under each option, default kernels and --reproducible: one task each) run by
``lar-prec zoo`` on the embedded LocalCluster with 1 and with 2 worker processes, each in a fresh
store (so every task runs), as a user runs it (the whole command, Dask's start included).

Reported per worker count:

* tasks per minute (tasks / the whole command's wall time);
* the share of wall time outside the analyses: 1 - (sum of the tasks' seconds in their workflow
  call) / (workers x wall) = scheduling, transfer, the cluster's start, store writes, the
  client's page (target <= 10%); and, stricter, the share outside load_and_run runs (every
  run.json's seconds, local error's runs included): what the analyses add to their runs;
* the peak bytes one task sent back (its pickled outcome: summary rows, report JSON, cells;
  target: no dump bytes), next to the largest dump folder a task left on the worker's disk.

Usage: .venv/bin/python bench/zoo.py [--cases cnn,resnet,...] [--workers 1,2] [--quick]
           [--out bench/RESULTS-zoo.md]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from harness import LAR_MODULE, ROOT, Table, cases as built_cases, timed, write
from results import machine_info  # noqa: E402

CASES = ("cnn", "resnet", "mlp", "attention", "multi_input", "shufflenet")
OPTIONS = ("nchw44", "ioc16", "io16xc32", "weight-preprocess")
CONFIGS = (("default", ()), ("reproducible", ("--reproducible",)))


def manifest_text(cases: List[str], options: List[str]) -> str:
    built = built_cases()
    parts = ["[zoo]\nname = \"bench\"\nlocal = false\n"]
    for name in cases:
        c = built[name]
        inputs = ", ".join(json.dumps(s) for s in c.input_specs())
        parts.append(f'[[model]]\nname = "{name}"\npath = {json.dumps(str(c.model))}\ninputs = [{inputs}]\n')
    parts.append(f'[[run]]\ncommand = "naive-vs-default"\noptions = [{", ".join(json.dumps(o) for o in options)}]\n')
    for name, flags in CONFIGS:
        parts.append(f'[[config]]\nname = "{name}"\nflags = [{", ".join(json.dumps(f) for f in flags)}]\n')
    return "\n".join(parts)


def dump_bytes(adir: str) -> int:
    return sum(f.stat().st_size for d in Path(adir).rglob("dump") if d.is_dir() for f in d.rglob("*") if f.is_file())


def _load() -> str:
    """The 1-minute load average: other work on a shared machine slows the zoo down as much as its own."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def one(manifest: Path, workers: int, work: Path) -> Dict[str, Any]:
    out, db = work / f"zoo-{workers}", work / f"results-{workers}.db"
    argv = [*LAR_MODULE, "zoo", str(manifest), "--store", str(db), "--out", str(out),
            "--workers", str(workers), "--json", str(work / f"zoo-{workers}.json"), "-q"]
    load = _load()
    proc = timed(argv)
    wall = proc.seconds
    if proc.returncode not in (0, 1, 3):  # 3: a task did not finish (counted: an option a case cannot take)
        raise SystemExit(f"lar-prec zoo exited {proc.returncode}: {proc.stderr[-2000:]}")
    z = json.loads((work / f"zoo-{workers}.json").read_text())
    tasks = z["tasks"]
    busy, runs = z["timing"]["tasks"], z["timing"]["runs"]
    return {"workers": workers, "load": f"{load} -> {_load()}", "tasks": len(tasks), "failed": z["counts"]["failed"], "wall": wall,
            "zoo_seconds": z["seconds"], "per_minute": len(tasks) / wall * 60, "busy": busy, "runs": runs,
            "outside_analyses": 1 - busy / (workers * wall), "outside_runs": 1 - runs / (workers * wall),
            # once the cluster is up: the client's start (imports) and the cluster's start left out
            "steady": 1 - busy / (workers * (z["seconds"] - z["timing"]["cluster_start"])),
            "cluster_start": z["timing"]["cluster_start"], "store": z["timing"]["store"],
            "peak_bytes": z["timing"]["peak_result_bytes"],
            "median_bytes": sorted(e.get("result_bytes") or 0 for e in tasks)[len(tasks) // 2],
            "largest_dump": max((dump_bytes(e["analysis_dir"]) for e in tasks if e.get("analysis_dir")), default=0),
            "kept_dumps": sum(e["state"] == "done" and not e["dumps_removed"] for e in tasks),
            "why": sorted({f"{e['model']} {e['column']}: {e['why'][:240]}" for e in tasks if e["state"] == "failed"})}


def report(rows: List[Dict[str, Any]], cases: List[str], options: List[str], machine: Dict[str, str]) -> str:
    lines = [
        "# Zoo: tasks per minute, time outside the analyses, bytes back per task (issue 37 #7)", "",
        f"`bench/zoo.py`, {time.strftime('%Y-%m-%d')}, `lar-prec zoo` on the embedded LocalCluster, a fresh store "
        f"each run. Zoo: {len(cases)} cases ({', '.join(cases)}) x {len(options)} options ({', '.join(options)}) x "
        f"{len(CONFIGS)} configurations ({', '.join(c for c, _ in CONFIGS)}) of naive-vs-default (no local error), "
        "bundled load_and_run, this machine.", "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['ram']}; load average at the start "
        f"{machine['load']}; lar-prec {machine['lar-prec']}.", "",
    ]
    table = Table("workers", "load (1 min) before -> after", "tasks", "failed", "wall s (whole command)", "tasks/min",
                  "cluster start s", "store s (client)", "outside the analyses (target <= 10%)",
                  "the same once the cluster is up", "outside load_and_run runs", "peak bytes back/task", "median",
                  "largest dump left on a worker")
    for r in rows:
        table.row(r["workers"], r["load"], r["tasks"], r["failed"], f"{r['wall']:.1f}", f"{r['per_minute']:.1f}",
                  f"{r['cluster_start']:.1f}", f"{r['store']:.2f}", f"{100 * r['outside_analyses']:.1f}%",
                  f"{100 * r['steady']:.1f}%", f"{100 * r['outside_runs']:.1f}%", f"{r['peak_bytes']:,}",
                  f"{r['median_bytes']:,}", f"{r['largest_dump']:,} ({r['kept_dumps']} task(s) kept theirs: a divergence)")
    lines += table.lines()
    for r in rows:
        lines += [f"- failed with {r['workers']} worker(s): {w}" for w in r["why"]]
    lines += ["", "Outside the analyses = 1 - (sum of the tasks' seconds in their workflow call) / (workers x wall): "
              "the client's start, the cluster's start, scheduling, transfer, store writes and the history check, the "
              "page, and workers idle at the end while the last tasks run. Once the cluster is up: the same without the "
              "client's start and the cluster's start (wall = the zoo's own seconds less the cluster's start). Outside "
              "load_and_run runs = 1 - (sum of every run.json's seconds) / (workers x wall): also the analyses' own "
              "comparing and rooting. Bytes back = the pickled outcome a worker returns (the summary's rows, the "
              "report JSON, the page's cells); no dump byte travels (a clean task's dumps are removed on the "
              "worker, a divergent one's stay there)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--options", default=",".join(OPTIONS))
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--quick", action="store_true", help="cnn, 2 options, 1 and 2 workers: proves the script works")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS-zoo.md")
    args = ap.parse_args()
    cases, options = args.cases.split(","), args.options.split(",")
    if args.quick:
        cases, options = ["cnn"], options[:2]
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="lar-prec-bench-zoo-") as tmp:
        work = Path(tmp)
        manifest = work / "zoo.toml"
        manifest.write_text(manifest_text(cases, options))
        rows = [one(manifest, int(w), work) for w in args.workers.split(",")]
    write(args.out, report(rows, cases, options, machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
