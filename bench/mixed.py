#!/usr/bin/env python
"""The cost of ``lar-prec mixed`` (issue 23 #6): its time and its model runs against a sweep of
the same option in the same run, and against the published cost of the anchors' searches.

For each case: ``lar-prec mixed MODEL --option O`` and ``lar-prec sweep MODEL --options O``
(whole processes, alternating, ``--repeat`` times, medians). Model runs are counted from the
analysis folders (one ``run.json`` per load_and_run process: the option's runs, the layerwise
runs of local error, the oracle's runs and each verification); graph rewrites and graph reads
(child processes that load the model but run nothing) are counted apart.

The anchors' costs are their published search shapes, not runs here: ONNX Runtime's
mixed-precision search (``onnxconverter_common.auto_mixed_precision``) made 52 whole-model
attempts on the model of its documentation; Polygraphy's ``debug precision`` builds one engine
per bisection step, ceil(log2 N) for N layers, each build followed by a run. The table puts
them in model runs next to lar-prec's, and in seconds at this case's measured time of one run
of the model under the option (an estimate, marked so).

Usage:
    .venv/bin/python bench/mixed.py [--cases cnn,resnet] [--option ioc16] [--repeat 3] [--out bench/RESULTS-mixed.md]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

from harness import LAR_MODULE, ROOT, Table, alternate, case, cpu_name, timed, write

#: issue 23 #6: at most this many model runs beyond a sweep of the option
TARGET_EXTRA_RUNS = 3
ORT_ATTEMPTS = 52


def _count(folder: Path) -> Tuple[int, int]:
    """(load_and_run processes: run.json files, other child processes: their .log folders)."""
    runs = sum(1 for _ in folder.rglob("run.json"))
    others = sum(1 for p in folder.rglob("*.log") if p.is_dir())
    return runs, others


def bench_case(name: str, option: str, repeat: int, tmp: Path) -> Dict[str, object]:
    c = case(name)
    model, inputs = c.model, ";".join(c.input_specs())
    times: Dict[str, List[float]] = {"mixed": [], "sweep": []}
    last: Dict[str, Path] = {}

    def one(what: str, flag: str, k: int) -> None:
        out = tmp / f"{name}-{what}-{k}"
        argv = LAR_MODULE + [what, str(model), "--input", inputs, flag, option, "--out", str(out), "-q",
                             "--json", str(tmp / f"{name}-{what}-{k}.json")]
        times[what].append(timed(argv, stdout=False, ok=(0, 1)).seconds)
        last[what] = out

    # mixed and its counterpart, a sweep of the same option, in turn
    alternate([("mixed", "--option"), ("sweep", "--options")], repeat, one)
    data = json.loads((tmp / f"{name}-mixed-{repeat - 1}.json").read_text())
    m_runs, m_other = _count(last["mixed"])
    s_runs, s_other = _count(last["sweep"])
    option_run = next((r["seconds"] for r in data["runs"] if r["label"] == option and r["seconds"]), None)
    n_ops = len(data["operators"])
    return {
        "case": name, "option": option, "mixed_s": statistics.median(times["mixed"]),
        "sweep_s": statistics.median(times["sweep"]), "mixed_runs": m_runs, "mixed_other": m_other,
        "sweep_runs": s_runs, "sweep_other": s_other, "verifications": len(data["attempts"]),
        "kept": [k["name"] for k in data["kept"]], "verdict": data["verdict"], "operators": n_ops,
        "one_run_s": option_run, "polygraphy_steps": max(1, math.ceil(math.log2(max(n_ops, 2)))),
    }


def render(rows: List[Dict[str, object]], repeat: int) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = cpu_name(platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    table = Table("case", "option", "verdict", "kept in float32", "mixed s", "sweep s", "ratio", "mixed runs (other)",
                  "sweep runs (other)", f"extra runs (target <= {TARGET_EXTRA_RUNS})", "verifications",
                  "Polygraphy bisection, runs", "ONNX Runtime, runs", "one run s", "ORT est. s")
    for r in rows:
        extra = int(r["mixed_runs"]) - int(r["sweep_runs"])  # type: ignore[arg-type]
        one = r["one_run_s"]
        if one:
            table.row(r["case"], r["option"], r["verdict"], ", ".join(r["kept"]) or "-",  # type: ignore[arg-type]
                      f"{r['mixed_s']:.1f}", f"{r['sweep_s']:.1f}", f"{r['mixed_s'] / r['sweep_s']:.2f}x",  # type: ignore[operator]
                      f"{r['mixed_runs']} ({r['mixed_other']})", f"{r['sweep_runs']} ({r['sweep_other']})",
                      f"{extra} {'PASS' if extra <= TARGET_EXTRA_RUNS else 'FAIL'}", r["verifications"],
                      f"{r['polygraphy_steps']} (N={r['operators']})", ORT_ATTEMPTS, f"{one:.2f}",
                      f"{ORT_ATTEMPTS * one:.0f} (est.)")
        else:
            table.row(r["case"], r["option"], r["verdict"], "-", f"{r['mixed_s']:.1f}", f"{r['sweep_s']:.1f}", "-",
                      r["mixed_runs"], r["sweep_runs"], extra, r["verifications"], "-", ORT_ATTEMPTS, "-", "-")
    lines = [
        "# lar-prec mixed: its cost against a sweep of the option and the anchors' searches",
        "",
        f"Written by `bench/mixed.py` on {now}; {cpu}, {os.cpu_count()} cores; medians of {repeat} whole "
        "processes, alternating. Model runs: load_and_run processes (run.json files in the analysis "
        "folder); other: graph reads and rewrites (child processes that load the model, run nothing).",
        "",
        *table.lines(),
    ]
    lines += [
        "",
        "Extra runs beyond the sweep: the verifications (one when the first step holds, none when the "
        "option alone is within tolerance) and the oracle's layerwise runs (naive kernels under the "
        "option, and float32 compute under ioc16), which only run when an operator is proposed or kept. "
        "Both run the naive kernels under the option (correct float16: the level of the outputs' "
        "tolerance); the sweep also runs the plain default run and its layerwise model.",
        "",
    ]
    return "\n".join(lines)


def main(argv: List[str] = None) -> int:  # type: ignore[assignment]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="cnn,resnet")
    ap.add_argument("--option", default="ioc16", choices=("ioc16", "io16xc32"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS-mixed.md"))
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lar-prec-bench-mixed-") as tmp:
        rows = [bench_case(c, a.option, a.repeat, Path(tmp)) for c in a.cases.split(",") if c]
    write(Path(a.out), render(rows, a.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
