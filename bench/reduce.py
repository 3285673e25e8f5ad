#!/usr/bin/env python
"""What ``lar-prec reduce`` leaves and what it costs (issue 39 #5): for each finding of the
cases' sweeps (every option that diverges, crashes or hangs), the operators before and after
and the load_and_run runs spent, against the targets: at most 10 operators left, at most
3 log2(N) + 10 runs for a graph of N operators.

Each case is swept once (``lar-prec sweep``, its default options, local error on: the roots
are the sweep's own), then each failing option is reduced (``lar-prec reduce --option``, a
whole process). Runs are read from ``reduce.json`` and checked against the run.json files of its
folder (one per load_and_run process); the graph reads and part builds (child processes that
load the model, run nothing) are its ``builds``. A finding that does not reproduce here (exit 2:
a crash that became a stall with another message, a jitter that moved) is reported with why.
``--pair`` adds the stand-in fault of the tests (tests/wrapped_lar.py ``WRAPPED_LAR_PAIR_FAULT``:
a convolution wrong only when a ReLU consumes it) on cnn and resnet, what a one-operator repro misses.

Usage:
    .venv/bin/python bench/reduce.py [--cases cnn,resnet] [--jobs 2] [--pair] [--out bench/RESULTS-reduce.md]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from harness import LAR_MODULE, ROOT, Table, cases, timed, write
from results import machine_info  # bench/: the machine's lines every RESULTS file has

TARGET_OPS = 10


def target_runs(n: int) -> float:
    return 3 * math.log2(max(n, 1)) + 10


def _reduce(adir: Path, out: Path, extra: List[str], label: Dict[str, object]) -> Dict[str, object]:
    p = timed(LAR_MODULE + ["reduce", str(adir), "--out", str(out), "--json", str(out) + ".json", "-q", *extra],
              timeout=7200)
    row: Dict[str, object] = {**label, "seconds": round(p.seconds, 1), "exit": p.returncode}
    if p.returncode != 1 or not Path(str(out) + ".json").is_file():
        row["error"] = p.last_line()
        return row
    d = json.loads(Path(str(out) + ".json").read_text())
    f = d["finding"]
    row.update(finding=(f["root"]["name"] if f["root"] else f["signature"]), klass=f["class"],
               before=d["operators_before"], after=d["operators_after"], runs=d["runs"], builds=d["builds"],
               counted=sum(1 for _ in out.rglob("run.json")), target=round(target_runs(d["operators_before"]), 1),
               rejected=d["rejected"], kept=", ".join(k["name"] for k in d["kept"]))
    return row


def bench_case(name: str, c, tmp: Path, jobs: int) -> List[Dict[str, object]]:
    sdir = tmp / f"{name}-sweep"
    p = timed(LAR_MODULE + ["sweep", str(c.model), "--input", ";".join(c.input_specs()), "--out", str(sdir),
                            "-q", "-j", str(jobs), "--json", str(sdir) + ".json"], timeout=7200)
    if p.returncode not in (0, 1):
        return [{"case": name, "option": "-", "error": f"sweep exit {p.returncode}: {p.stderr.strip()[-300:]}"}]
    rep = json.loads(Path(str(sdir) + ".json").read_text())
    failing = [o for o in rep["options"] if o.get("verdict") == "diverges"
               or o.get("status") in ("crashed", "stalled", "hung", "load_failed")]
    rows = []
    for o in failing:
        rows.append(_reduce(sdir, tmp / f"{name}-{o['option']}-reduced", ["--option", o["option"]],
                            {"case": name, "option": o["option"], "status": o.get("status")}))
        print(f"  {name} {o['option']}: {rows[-1]}", file=sys.stderr)
    return rows or [{"case": name, "option": "(none fails)"}]


#: the stand-in fault of ``--pair``: case -> the constant whose convolution is wrong only before a ReLU
PAIRS = {"cnn": "c2.weight", "resnet": "blocks.1.a.weight"}


def bench_pair(name: str, tmp: Path) -> Dict[str, object]:
    c = cases()[name]
    (tmp / f"{name}-pair-cache").mkdir()
    lar = tmp / f"{name}_pair_load_and_run"
    lar.write_text(f"#!/bin/sh\nWRAPPED_LAR_PAIR_FAULT={PAIRS[name]}:1e-3 WRAPPED_LAR_CACHE={tmp / f'{name}-pair-cache'} "
                   f"PYTHONPATH={ROOT} exec {sys.executable} {ROOT / 'tests' / 'wrapped_lar.py'} \"$@\"\n")
    lar.chmod(0o755)
    adir = tmp / f"{name}-pair-nvd"
    label = {"case": f"{name} (stand-in pair fault)", "option": "naive-vs-default"}
    p = timed(LAR_MODULE + ["naive-vs-default", str(c.model), "--input", ";".join(c.input_specs()),
                            "--out", str(adir), "-q", "--no-local", "--lar", str(lar)], timeout=7200)
    if p.returncode != 1:
        return {**label, "error": p.stderr.strip()[-300:]}
    return _reduce(adir, tmp / f"{name}-pair-reduced", ["--lar", str(lar)], label)


def _cell(row: Dict[str, object], key: str) -> str:
    v = row.get(key)
    return "-" if v is None else str(v)


def report(rows: List[Dict[str, object]], seconds: float, load: str) -> str:
    done = [r for r in rows if "after" in r]
    ok_ops = sum(int(r["after"]) <= TARGET_OPS for r in done)  # type: ignore[arg-type]
    ok_runs = sum(float(r["runs"]) <= float(r["target"]) for r in done)  # type: ignore[arg-type]
    m = machine_info()
    lines = [
        "# lar-prec reduce: operators left and runs spent per finding of the cases' sweeps", "",
        f"Written by `bench/reduce.py` on {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; {m['cpu']}, {m['cores']} "
        f"cores; MegEngine {m['megengine']}; lar-prec {m['lar-prec']}; load average {load}; {seconds:.0f} s in all. Each case swept with its default options "
        "(local error on), then each option that diverges, crashes or hangs reduced by `lar-prec reduce --option` "
        "(a whole process). Runs: load_and_run processes (reduce.json's `runs`; `counted`: run.json files in its "
        "folder); builds: graph reads and part builds (child processes that run nothing).", "",
        f"Targets: <= {TARGET_OPS} operators left: {ok_ops}/{len(done)} PASS; <= 3 log2(N) + 10 runs: "
        f"{ok_runs}/{len(done)} PASS; {len(rows) - len(done)} finding(s) not reduced (why in the last column).", "",
    ]
    table = Table("case", "option", "class", "finding", "operators N -> left", "runs (counted)", "target runs", "builds",
                  "rejected", "kept", "s", "result")
    for r in rows:
        if "after" in r:
            verdict = ("PASS" if int(r["after"]) <= TARGET_OPS and float(r["runs"]) <= float(r["target"])  # type: ignore[arg-type]
                       else "FAIL")
            table.row(r["case"], r["option"], r["klass"], r["finding"], f"{r['before']} -> {r['after']}",
                      f"{r['runs']} ({r['counted']})", r["target"], r["builds"], r["rejected"], r["kept"], r["seconds"],
                      verdict)
        else:
            table.row(r["case"], r["option"], *["-"] * 8, _cell(r, "seconds"),
                      _cell(r, "error") if "error" in r else "nothing to reduce")
    lines += table.lines()
    lines += ["", "Runs include the whole model's check (1) and the naive run of the result (1). A crash or "
              "stall costs its `LAR_PREC_STALL_AFTER` (5 s) per part that stalls; its signature is MegEngine's first "
              "fatal line, so a crash and a stall after the same line are one failure."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=None, help="comma-separated case names [default: every case built]")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once in each sweep")
    ap.add_argument("--pair", action="store_true", help="also the stand-in two-operator fault on cnn and resnet")
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS-reduce.md"))
    args = ap.parse_args()
    built = cases()
    names = args.cases.split(",") if args.cases else sorted(built)
    load0 = os.getloadavg()
    t0 = time.monotonic()
    rows: List[Dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="lar-prec-bench-reduce-") as tmp:
        for name in PAIRS if args.pair else ():
            rows.append(bench_pair(name, Path(tmp)))
            print(f"  pair: {rows[-1]}", file=sys.stderr)
        for name in names:
            print(f"{name}: sweeping", file=sys.stderr)
            rows += bench_case(name, built[name], Path(tmp), args.jobs)
    load = f"{load0[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    write(Path(args.out), report(rows, time.monotonic() - t0, load), show=False)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
