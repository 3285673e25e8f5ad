#!/usr/bin/env python
"""Regressions found by ``lar-prec check`` against history (issue 36 #4): anyone can run it.

    .venv/bin/python bench/regressions.py                          # ~1 h on 2 busy cores
    .venv/bin/python bench/regressions.py --cases cnn --clean 11   # a quick look

Every analysis is a real ``lar-prec naive-vs-default`` with ``--fast-run`` (the run-to-run jitter
of algorithm choice: fastrun_shake's convolutions pick differently from run to run) and local
error, through a stand-in build of load_and_run (tests/wrapped_lar.py around the bundled one; the
model stays the same):

* ``--clean`` clean builds per case: the history;
* faulty builds (``WRAPPED_LAR_OP_FAULT``: the kernel of the operator reading a weight is wrong,
  the dump shows the model's own weight): output 1+1e-4 and 1+1e-5 too large on ``--ops``
  operators per case; a changed algorithm (that kernel computes with the weight rounded to 10
  mantissa bits, as TF32 does); a NaN (that operator's output is NaN).

Then each check is ``lar_prec.workflows.history.check`` (what ``lar-prec check`` runs) on a new
SQLite store holding a history of clean runs and, newest, the checked run:

* a **fault** is *found* when the check exits 1 and the faulted operator is among the
  regressed, and *rooted* when it is the first root listed; its history: every clean run;
* a **clean check** is each clean run against the other clean runs of its case (leave one out);
  a *false alarm* is a clean check that exits 1.

Analyses are kept under ``--work`` and reused by a later run (delete the folder to redo them).
Prints one line per check and the tables (Markdown, also to ``--out``); nothing is asserted.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from harness import LAR_MODULE, PY, ROOT, Table, cases, input_args, timed, write  # (first: this checkout's lar_prec)
from lar_prec.report.model import read_json  # noqa: E402
from lar_prec.store.db import open_store  # noqa: E402
from lar_prec.store.summary import Summary  # noqa: E402
from lar_prec.workflows.history.history import check, summarize  # noqa: E402

CASES = ("fastrun_shake", "cnn", "resnet", "mlp", "attention")
SIZES = ("1e-4", "1e-5")
#: the other faults, on one operator per case: the middle one of those faulted that sums products
#: (a LayerNorm's weight of ones is the same rounded to 10 bits: no fault at all)
OTHER = (("changed algorithm", "bits=10"), ("NaN", "nan"))


def stand_in(path: Path, build: str, fault: Optional[str], cache: Path) -> Path:
    """A load_and_run build: tests/wrapped_lar.py with its fault built in (BUILD makes each file
    differ, as builds do; every build shares one cache of rewritten models)."""
    sets = f"BUILD={build} WRAPPED_LAR_CACHE={cache}" + (f" WRAPPED_LAR_OP_FAULT={fault}" if fault else "")
    path.write_text(f"#!/bin/sh\n{sets} PYTHONPATH={ROOT} exec {PY} {ROOT / 'tests' / 'wrapped_lar.py'} "
                    "\"$@\"\n")
    path.chmod(0o755)
    return path


def analyse(case, out: Path, lar: Path, judge_only: bool = False) -> Optional[Path]:
    """One naive-vs-default --fast-run analysis into ``out`` (kept: a later run reuses it)."""
    if (out / "report.json").is_file():
        return out
    if judge_only:
        return None
    argv = [*LAR_MODULE, "naive-vs-default", str(case.model), *input_args(case), "--lar", str(lar),
            "--lar-args=--fast-run", "--out", str(out), "-q"]
    p = timed(argv, env={"LAR_PREC_STORE": ""}, timeout=1800)
    if p.returncode not in (0, 1) or not (out / "report.json").is_file():
        print(f"  analysis failed (exit {p.returncode}): {p.stderr.strip()[-400:]}", flush=True)
        return None
    return out


def weights(report: Dict[str, Any], n: int) -> List[str]:
    """``n`` weight constants spread over the graph (first, last and evenly between)."""
    names = [v["name"] for v in report["vars"] if v["opr_type"] == "ImmutableTensor" and v["name"].endswith(".weight")]
    if len(names) <= n:
        return names
    return [names[round(k * (len(names) - 1) / (n - 1))] for k in range(n)] if n > 1 else names[:1]


SUMS = ("ConvolutionForward", "ConvBiasForward", "MatrixMul", "BatchedMatrixMul")


def summing(report: Dict[str, Any], names: List[str]) -> List[str]:
    """The names of ``names`` whose reader is a convolution or matrix product."""
    ids = {v["id"]: v["name"] for v in report["vars"] if v["name"] in names}
    read = {ids[i] for v in report["vars"] if v["opr_type"] in SUMS for i in v.get("inputs") or () if i in ids}
    return [n for n in names if n in read]


def faulted_key(s: Summary, weight: str) -> Optional[str]:
    """The key of the operator reading constant ``weight``."""
    return next((o.op_key for o in s.ops if f"c/{weight}" in o.inputs), None)


def judged(history: Sequence[Summary], checked: Summary, work: Path) -> Dict[str, Any]:
    """``check`` of ``checked`` on a new store holding ``history`` (time order) before it."""
    fd, path = tempfile.mkstemp(suffix=".db", dir=work)
    os.close(fd)
    os.unlink(path)
    try:
        with open_store(path) as st:
            for k, s in enumerate([*history, checked]):
                run = dataclasses.replace(s.run, uid=f"{k:04d}{os.urandom(14).hex()}",
                                          created=f"2026-01-01T00:{k // 60:02d}:{k % 60:02d}+00:00")
                st.write(Summary(run, s.ops))
        return check(path)
    finally:
        os.unlink(path)


@dataclass
class Tally:
    """What the checks found: per fault kind (found, rooted), per case (clean checks, alarms,
    operators judged, operators falsely regressed; faults, found)."""

    faults: Dict[str, List[Tuple[bool, bool]]] = field(default_factory=dict)
    cases: Dict[str, List[int]] = field(default_factory=dict)

    def case(self, name: str) -> List[int]:
        return self.cases.setdefault(name, [0, 0, 0, 0, 0, 0])


def check_clean(name: str, clean: List[Summary], work: Path, tally: Tally) -> None:
    """Each clean run against every other clean run of its case (leave one out)."""
    row = tally.case(name)
    for k, s in enumerate(clean):
        res = judged(clean[:k] + clean[k + 1:], s, work)
        row[0] += 1
        row[1] += res["exit_code"] == 1
        row[2] += len(s.ops)
        row[3] += len(res["regressed"])
        if res["exit_code"]:
            print(f"  FALSE ALARM clean-{k:02d}: {res['verdict']}: " +
                  "; ".join(f"{v['name']} {v['why']}" for v in res["regressed"][:3]), flush=True)


def check_faults(name: str, case, clean: List[Summary], args: argparse.Namespace, tally: Tally) -> None:
    """Every fault of the case (analysed first unless cached) against all its clean runs."""
    builds, cache = args.work / "builds", args.work / "cache"
    report = json.loads((args.work / name / "clean-00" / "report.json").read_text())
    picked = weights(report, args.ops)
    sums = summing(report, picked) or picked
    middle = sums[len(sums) // 2]
    row = tally.case(name)
    faults = [(size, w, size) for size in SIZES for w in picked] + [(lb, middle, sp) for lb, sp in OTHER]
    for label, w, spec in faults:
        tag = f"{w}-{spec}".replace("=", "")
        lar = stand_in(builds / f"fault-{tag}", tag, f"{w}:{spec}", cache)
        d = analyse(case, args.work / name / f"fault-{tag}", lar, args.judge_only)
        if d is None:
            continue
        s = summarize(read_json(d / "report.json"))
        key = faulted_key(s, w)
        res = judged(clean, s, args.work)
        regressed = [v["op_key"] for v in res["regressed"]]
        hit = res["exit_code"] == 1 and key in regressed
        rooted = hit and regressed[0] == key and res["regressed"][0]["root"]
        tally.faults.setdefault(label, []).append((hit, rooted))
        row[4] += 1
        row[5] += hit
        mine = next((v for v in res["regressed"] if v["op_key"] == key), None)
        print(f"  {label:17} {w:18} {'found' if hit else 'MISSED':6} {'rooted' if rooted else '':6} "
              f"{mine['why'] if mine else res['verdict']}", flush=True)


def tables(tally: Tally) -> List[str]:
    faults = Table("injected", "checks", "found (the faulted operator regressed)", "recall", "rooted (listed first, the root)")
    for label, rs in tally.faults.items():
        n, hits, roots = len(rs), sum(h for h, _ in rs), sum(r for _, r in rs)
        faults.row(label, n, hits, f"{100 * hits / n:.1f}%", roots)
    per_case = Table("case", "clean checks", "false alarms", "operators judged", "falsely regressed", "faults found")
    for name, (n, alarms, ops, false_ops, found, hits) in tally.cases.items():
        per_case.row(name, n, alarms, ops, false_ops, f"{hits}/{found}")
    total = [sum(col) for col in zip(*tally.cases.values())]
    per_case.row("all", total[0], f"{total[1]} ({100 * total[1] / max(1, total[0]):.1f}%)", total[2], total[3],
                 f"{total[5]}/{total[4]}")
    return [*faults.lines(), "", *per_case.lines()]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--clean", type=int, default=20, help="clean runs per case (>= 11: 10+ in every history)")
    ap.add_argument("--ops", type=int, default=4, help="faulted operators per case")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "data" / "regressions")
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown tables here")
    ap.add_argument("--judge-only", action="store_true", help="no new analyses: judge those under --work")
    args = ap.parse_args(argv)
    t0 = time.time()
    by_name = cases()
    (args.work / "builds").mkdir(parents=True, exist_ok=True)
    (args.work / "cache").mkdir(exist_ok=True)
    tally = Tally()
    for name in args.cases.split(","):
        case = by_name[name]
        clean: List[Summary] = []
        for k in range(args.clean):
            lar = stand_in(args.work / "builds" / f"clean-{k:02d}", str(k), None, args.work / "cache")
            d = analyse(case, args.work / name / f"clean-{k:02d}", lar, args.judge_only)
            if d is not None:
                clean.append(summarize(read_json(d / "report.json")))
        print(f"{name}: {len(clean)} clean runs ({time.time() - t0:.0f} s)", flush=True)
        check_clean(name, clean, args.work, tally)
        check_faults(name, case, clean, args, tally)
    lines = [f"`bench/regressions.py --cases {args.cases} --clean {args.clean} --ops {args.ops}`, "
             f"{time.strftime('%Y-%m-%d')}, {time.time() - t0:.0f} s.", "", *tables(tally)]
    write(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
