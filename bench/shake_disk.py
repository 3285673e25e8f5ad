#!/usr/bin/env python
"""Disk of ``lar-prec shake --repeat N`` against one run (issue 22 #4): run 1 is kept whole and
every later run keeps only the variables that differ from run 1.

Measures, on one case: the analysis folder of ``lar-prec run`` (one run: inputs, run.json, its
dump), then ``lar-prec shake --repeat N`` (and the same with ``--keep-all``, unless
``--no-keep-all``): the folder's size at the end and its peak while the shake runs (sampled
every ``--every`` seconds). Sizes are allocated blocks (what ``du`` counts). Writes a Markdown
table to ``--out`` (and prints it).

Usage:
    .venv/bin/python bench/shake_disk.py [--case resnet] [--repeat 50] [--config default] [--out bench/RESULTS-shake-disk.md]
    .venv/bin/python bench/shake_disk.py --config fast-run --no-keep-all --append    # the jittering case
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Tuple

from harness import LAR_MODULE, ROOT, Table, case as built_case, input_args, timed, write

TARGET = 3.0


def disk_bytes(path: Path) -> int:
    """Allocated bytes of every file under ``path`` (symlinks not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue  # removed while we walked: a pruned file
            total += st.st_blocks * 512
    return total


def run_measured(argv: List[str], folder: Path, every: float) -> Tuple[int, float, int, int]:
    """(exit code, seconds, peak bytes of ``folder`` while it ran, bytes at the end)."""
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            if folder.exists():
                peak = max(peak, disk_bytes(folder))
            done.wait(every)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    proc = timed(argv, stdout=False, timeout=None)
    done.set()
    t.join()
    end = disk_bytes(folder)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr[-2000:])
    return proc.returncode, proc.seconds, max(peak, end), end


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="resnet")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--config", default="default", choices=("default", "reproducible", "fast-run"))
    ap.add_argument("--every", type=float, default=0.2, help="seconds between samples of the folder's size")
    ap.add_argument("--no-keep-all", action="store_true", help="skip the --keep-all run")
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS-shake-disk.md"))
    ap.add_argument("--append", action="store_true", help="add to --out instead of replacing it")
    args = ap.parse_args()
    case = built_case(args.case)
    model, inputs = str(case.model), input_args(case)
    lar = LAR_MODULE
    rows: Dict[str, Tuple[int, float, int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="lar-prec-shake-disk-") as tmp:
        t = Path(tmp)
        one = t / "one"
        rows["one run (lar-prec run)"] = run_measured(
            [*lar, "run", model, "--config", args.config, *inputs, "--out", str(one)],
            one, args.every)
        shakes = [("", "shake")] + ([] if args.no_keep_all else [("--keep-all", "shake --keep-all")])
        for flag, name in shakes:
            folder = t / name.replace(" ", "").replace("-", "")
            argv = [*lar, "shake", model, *inputs, "--repeat", str(args.repeat),
                    "--config", args.config, "--out", str(folder), "-q", *([flag] if flag else [])]
            rows[f"{name} --repeat {args.repeat}"] = run_measured(argv, folder, args.every)
        report = json.loads(next((t / "shake").glob("**/report.json")).read_text()) if (t / "shake").exists() else {}
    one_b = rows["one run (lar-prec run)"][3]
    lines = [
        f"# shake's disk against one run ({args.case}, --config {args.config})",
        "",
        f"Written by `bench/shake_disk.py --case {args.case} --repeat {args.repeat} --config {args.config}` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}. Sizes are allocated blocks of the "
        f"analysis folder; peak sampled every {args.every} s while the command ran. Target (issue 22): "
        f"shake --repeat 50 < {TARGET:g}x one run.",
        "",
    ]
    table = Table("command", "exit", "seconds", "peak", "at the end", "peak / one run", "end / one run")
    for name, (rc, secs, peak, end) in rows.items():
        table.row(f"`{name}`", rc, f"{secs:.1f}", f"{peak / 1e6:.2f} MB", f"{end / 1e6:.2f} MB", f"{peak / one_b:.2f}x",
                  f"{end / one_b:.2f}x")
    lines += table.lines()
    shake_row = rows[f"shake --repeat {args.repeat}"]
    verdict = "PASS" if shake_row[2] / one_b < TARGET else "FAIL"
    lines += ["", f"Result: shake --repeat {args.repeat} peaks at {shake_row[2] / one_b:.2f}x one run "
                  f"(target < {TARGET:g}x): **{verdict}**."]
    if report:
        st = report.get("storage", {})
        lines += [f"The shake found {'jitter' if report.get('diverged') else 'no jitter'}; "
                  f"{st.get('pruned_runs')} runs pruned, {st.get('vars_removed')} var files "
                  f"({(st.get('bytes_removed') or 0) / 1e6:.1f} MB) not kept"
                  + (f"; local error's feeds and dumps removed once measured ({(st.get('local_bytes_removed') or 0) / 1e6:.1f} MB)"
                     if st.get("local_bytes_removed") is not None else "") + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        out = Path(args.out)
        write(out, (out.read_text() + "\n" if args.append and out.exists() else "") + text, show=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
