#!/usr/bin/env python
"""Stalled runs (issue 21 §2): the sweep's wall time when options' runs die without exiting.

On some CPUs MegEngine prints ``bad err=45 in Xbyak::Error`` under nchw88 or layout-transform
and then waits forever with every thread parked, using no CPU. This machine's MegEngine may
not do that, so a stand-in binary does: it runs the bundled load_and_run, except under the
listed options, where it prints that line and pauses. The same sweep runs twice, with the CPU
watch on (default grace, ``LAR_PREC_STALL_AFTER``) and off (``=0``: only the timeout ends the
run), and the wall times are printed side by side.

Usage:
    .venv/bin/python bench/stall.py [--case cnn] [--timeout 60] [--options nchw88,fuse-conv-bias-nonlinearity]
"""
from __future__ import annotations

import argparse
import json
import stat
import sys
import tempfile
from pathlib import Path

from harness import LAR_MODULE, Table, alternate, case as built_case, input_args, timed, write

STAND_IN = """#!{python}
import os, signal, sys
if any(f in sys.argv for f in {flags!r}):
    sys.stderr.write("bad err=45 in Xbyak::Error\\n"); sys.stderr.flush()
    signal.pause()
os.execv({python!r}, [{python!r}, "-m", "lar_prec.lar", *sys.argv[1:]])
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="cnn")
    ap.add_argument("--timeout", type=float, default=60.0, help="the sweep's --timeout (its default is 300)")
    ap.add_argument("--options", default="nchw88,fuse-conv-bias-nonlinearity",
                    help="sweep options; the first one stalls")
    ap.add_argument("--stall", default="", help="LAR_PREC_STALL_AFTER for the watched run (default: lar-prec's)")
    ap.add_argument("--out", help="also append the result lines to this Markdown file")
    args = ap.parse_args()
    case = built_case(args.case)
    stalling = args.options.split(",")[0]
    flag = {"nchw88": "--enable-nchw88"}.get(stalling, f"--{stalling}" if stalling.startswith("enable") else f"--enable-{stalling}")
    table = Table("case", "CPU watch", "sweep wall time", "stalled option's status", "exit")
    with tempfile.TemporaryDirectory(prefix="lar-prec-stall-") as tmp:
        binary = Path(tmp) / "load_and_run"
        binary.write_text(STAND_IN.format(python=sys.executable, flags=[flag]))
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
        results = {}

        def sweep(watch: str, grace: "str | None", _round: int) -> None:
            out = Path(tmp) / f"sweep-{watch}"
            argv = [*LAR_MODULE, "sweep", str(case.model), *input_args(case), "--options", args.options,
                    "--lar", str(binary), "--timeout", f"{args.timeout:g}", "--no-local", "--out", str(out),
                    "--json", str(out) + ".json", "-q"]
            proc = timed(argv, env={"LAR_PREC_STALL_AFTER": grace}, timeout=None)
            rep = json.loads(Path(str(out) + ".json").read_text())
            status = {o["option"]: o["status"] for o in rep["options"]}
            results[watch] = proc.seconds
            table.row(args.case, f"watch {watch}", f"{proc.seconds:.1f} s", status.get(stalling), f"exit {proc.returncode}")

        # the watch on (lar-prec's grace, or --stall) and its counterpart, off (only the timeout ends the run)
        alternate([("on", args.stall or None), ("off", "0")], 1, sweep)
        ratio = results["on"] / results["off"]
    text = "\n".join(table.lines()) + (f"\n\nwall time with the watch on / off: {ratio:.2f} (timeout {args.timeout:g} s; "
                                       "the sweep's default timeout of 300 s makes the stalled option cost 300 s without "
                                       "the watch)")
    write(Path(args.out) if args.out else None, "\n## Stalled runs (issue 21 §2)\n\n" + text + "\n", append=True,
          show=False)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
