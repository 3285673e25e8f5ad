#!/usr/bin/env python
"""Sweep timing benchmark (issue 55): what `--speed-runs` costs and how well it repeats.

On one case (default resnet18), the same machine, one after the other:

1. `sweep CASE -j JOBS --speed-runs 0` (the default option set, local error on): wall time A;
2. the same with `--speed-runs R` (default 3): wall time B; ratio B / A (target <= 1.15);
3. the timing again (`--no-local`, the options timed in 2, `--speed-runs R`, `--speed-budget
   none`: its own sweep is shorter, so its budget would be too): each option's speed-up in 2
   and 3, and whether the second lies within the first's interval (and whether the two
   intervals overlap);
4. where a timed run's time goes: its process wall time against the sum of its timed
   iterations (the rest: interpreter start, model load, the warm-up).

Usage:
    .venv/bin/python bench/sweep_speed.py [--case resnet18] [-j 2] [--rounds 3] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from harness import BUILD, LAR_MODULE, cases, cpu_name, input_args, timed, write

TARGET = 1.15
WALL = 150.0


def sweep(case, tmp: Path, name: str, more) -> tuple:
    out = tmp / name
    argv = [*LAR_MODULE, "sweep", str(case.model), *input_args(case), "--out", str(out), "--json", f"{out}.json", "-q",
            *more]
    proc = timed(argv, timeout=7200)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{name} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return proc.seconds, json.loads(Path(f"{out}.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="resnet18")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--options", default=None, help="sweep --options (default: this CPU's default set)")
    ap.add_argument("--build", default=str(BUILD))
    ap.add_argument("--lar", default=None, help="the load_and_run (default: the bundled one)")
    ap.add_argument("--out", default=None, help="also write the section here (Markdown, appended)")
    a = ap.parse_args()
    case = cases(Path(a.build))[a.case]
    lar = ["--lar", a.lar] if a.lar else []
    common = ["-j", str(a.jobs), "--timeout", str(a.timeout), *lar] + (["--options", a.options] if a.options else [])
    lines = [f"## Timing the options (issue 55): `bench/sweep_speed.py --case {a.case} -j {a.jobs} --rounds {a.rounds}"
             + (f" --options {a.options}" if a.options else "") + "`",
             "", f"CPU: {cpu_name('?')}, python {sys.version.split()[0]}, "
             f"{'load_and_run ' + a.lar if a.lar else 'the bundled load_and_run'}", ""]
    with tempfile.TemporaryDirectory(prefix="lar-prec-bench-speed-") as tmp:
        wa, da = sweep(case, Path(tmp), "plain", [*common, "--speed-runs", "0"])
        print(f"without timing: wall {wa:.1f} s", flush=True)
        wb, db = sweep(case, Path(tmp), "timed", [*common, "--speed-runs", str(a.rounds)])
        print(f"with timing: wall {wb:.1f} s (timed runs {db['timing']['speed_seconds']:.1f} s)", flush=True)
        loaded = [o["option"] for o in db["options"] if (o.get("speed") or {}).get("status") == "timed"]
        over = [o["option"] for o in db["options"] if (o.get("speed") or {}).get("status") == "over_budget"]
        wc, dc = sweep(case, Path(tmp), "again", ["-j", str(a.jobs), "--timeout", str(a.timeout), "--speed-runs",
                                                 str(a.rounds), "--no-local", "--speed-budget", "none",
                                                 *lar, "--options", ",".join(loaded)])
        print(f"timing again (--no-local): wall {wc:.1f} s", flush=True)
        ratio = wb / wa
        lines += ["| sweep | wall s | runs s (summed) | local error s | timed runs s |", "|---|---|---|---|---|",
                  f"| `--speed-runs 0` | {wa:.1f} | {da['timing']['run_seconds']:.1f} | {da['timing']['local_seconds']:.1f} | - |",
                  f"| `--speed-runs {a.rounds}` | {wb:.1f} | {db['timing']['run_seconds']:.1f} | "
                  f"{db['timing']['local_seconds']:.1f} | {db['timing']['speed_seconds']:.1f} |", "",
                  f"{'PASS' if ratio <= TARGET else 'FAIL'}: with timing / without = {ratio:.2f} (target <= {TARGET}); "
                  f"{'PASS' if wb <= WALL else 'FAIL'}: wall with timing {wb:.1f} s (target <= {WALL:g} s)", "",
                  f"Timed: {len(loaded)} option(s) and the default run; not timed within the budget "
                  f"({db['speed'].get('budget_fraction')} of the sweep: {db['speed'].get('budget_seconds')} s, smallest "
                  f"allowance {db['speed'].get('allowance_seconds')} s): {', '.join(over) or 'none'}", "",
                  "| option | speed-up 1 [interval] | words 1 | speed-up 2 [interval] | words 2 | 2 within 1's interval "
                  "| intervals overlap |", "|---|---|---|---|---|---|---|"]
        again = {o["option"]: o["speed"] for o in dc["options"] if o.get("speed")}
        for o in db["options"]:
            s1, s2 = o.get("speed"), again.get(o["option"])
            if not s1 or not s2 or s1.get("speedup") is None or s2.get("speedup") is None:
                continue
            (l1, h1), (l2, h2) = s1["speedup_interval"], s2["speedup_interval"]
            lines.append(f"| {o['option']} | {s1['speedup']:.2f} [{l1:.2f}, {h1:.2f}] | {s1['words']} | "
                         f"{s2['speedup']:.2f} [{l2:.2f}, {h2:.2f}] | {s2['words']} | "
                         f"{'yes' if l1 <= s2['speedup'] <= h1 else 'no'} | {'yes' if l2 <= h1 and l1 <= h2 else 'no'} |")
        lines += ["", "| option | status | precision verdict | speed (with timing) |", "|---|---|---|---|"]
        for o in db["options"]:
            sp = o.get("speed") or {}
            lines.append(f"| {o['option']} | {o['status']} | {o.get('verdict') or '-'} | "
                         f"{sp.get('words') or '-'} |")
        walls, iters = [], []
        for o in [db["default"], *db["options"]]:
            sp = (o or {}).get("speed") or {}
            for d, its in zip(sp.get("run_dirs", []), sp.get("iterations_ms", [])):
                walls.append(json.loads((Path(d) / "run.json").read_text())["seconds"])
                iters.append(sum(its) / 1e3)
        if walls:
            lines += ["", f"Timed runs: {len(walls)} processes, {sum(walls):.1f} s wall summed, of which the timed "
                          f"iterations {sum(iters):.1f} s ({sum(iters) / sum(walls):.0%}); the rest is interpreter "
                          "start, model load and the warm-up iteration of each fresh process.",
                      f"Verdict with timing: {db['verdict']}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        write(Path(a.out), "\n" + text, append=True, show=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
