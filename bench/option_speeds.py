#!/usr/bin/env python
"""Which x86 option is measurably faster on this CPU, per float case (issue 55).

For each float case of ``cases/build`` (quantized, int and float16 cases left out) and each
option of the x86 default set but the float16 ones (``ioc16``, ``io16xc32``: emulated on x86,
~1000x slower), the sweep's own timing (:func:`lar_prec.workflows.sweep.speed.measure_speed`:
``--warmup-iter 1 --iter 10``, fresh processes, the default and every option interleaved in
rounds, each in the calling thread unless ``--worker-thread``), with the real C++
load_and_run (``--real PATH``) and/or the bundled runner (``python -m lar_prec.lar``). Prints
one row per case x option x tool: speed-up [interval] and the sweep's words, with the
machine's load average before and after each case.

Usage:
    .venv/bin/python bench/option_speeds.py [--tools real,bundled] [--cases cnn,resnet18]
        [--options weight-preprocess,record-comp-seq] [--rounds 3] [--real PATH] [--worker-thread]
        [--flags=--multithread=2] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from harness import BUILD, Table, cases, cpu_name, write

from lar_prec.workflows.sweep.options import DEFAULT_OPTIONS, OPTIONS
from lar_prec.workflows.sweep import speed
from lar_prec.workflows.sweep.speed import measure_speed

#: the real C++ load_and_run built by ../shared/real-lar/build.sh (sweep --lar PATH)
REAL = "/root/.cache/lar-prec/real-lar/741e6adb785f1f45/load_and_run"
#: cases the timing says nothing about: not float32 arithmetic (int8 inside, int32, float16)
NOT_FLOAT = ("quantized", "quant_mobile", "mbv2_int8", "mbv2_int8_expand", "mbv2_int8_proj", "qchain_int8",
             "qchain_int8_bad", "fp16", "int_ops")


def load() -> str:
    return "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=None, help="comma-separated (default: every float case)")
    ap.add_argument("--options", default=None, help="comma-separated (default: the x86 set without float16)")
    ap.add_argument("--tools", default="real,bundled")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--real", default=REAL)
    ap.add_argument("--flags", default="", help="extra load_and_run flags of every timed run (e.g. --cpu-default)")
    ap.add_argument("--worker-thread", action="store_true",
                    help="time as before the fix: the default CPU device, its worker thread's wake-up timed too")
    ap.add_argument("--build", default=str(BUILD))
    ap.add_argument("--out", default=None, help="also write the table here (Markdown, appended)")
    a = ap.parse_args()
    if a.worker_thread:
        speed.INPLACE = ()  # inplace_flags reads it at each call
    built = cases(Path(a.build))
    names = (a.cases.split(",") if a.cases
             else [n for n, c in built.items() if n not in NOT_FLOAT and c.dtype == "float32"])
    opts = a.options.split(",") if a.options else [o for o in DEFAULT_OPTIONS["x86"] if not OPTIONS[o].fp16]
    tools = {"real": a.real, "bundled": None}
    table = Table("case", "tool", "option", "speed-up [interval]", "words", "default ms", "option ms",
                  "load before/after")
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lar-prec-bench-optspeed-") as tmp:
        for name in names:
            c = built[name]
            inputs = ";".join(c.input_specs())
            for tool in a.tools.split(","):
                before, t0 = load(), time.monotonic()
                sp = measure_speed(c.model, inputs, Path(tmp) / f"{name}-{tool}", tools[tool], a.timeout,
                                   tuple(a.flags.split()), [(o, OPTIONS[o].flags) for o in opts], a.rounds)
                after = f"{before} / {load()}"
                dm = sp.default.median_ms if sp.default else None
                print(f"# {name} {tool}: {time.monotonic() - t0:.1f} s, default {sp.default.words()}", flush=True)
                for o, s in sp.options:
                    iv = "-" if s.speedup is None else f"{s.speedup:.2f} [{s.low:.2f}, {s.high:.2f}]"
                    line = table.row(name, tool, o, iv, s.words(), "-" if dm is None else f"{dm:.3g}",
                                     "-" if s.median_ms is None else f"{s.median_ms:.3g}", after)
                    print(line, flush=True)
    how = f"flags {a.flags or '-'}, " + ("the worker thread (as before)" if a.worker_thread else "the calling thread")
    text = "\n".join([f"CPU: {cpu_name('?')} ({os.cpu_count()} cores), python {sys.version.split()[0]}, "
                      f"{a.rounds} rounds, {how}, {time.monotonic() - t_all:.0f} s", ""] + table.lines()) + "\n"
    write(Path(a.out) if a.out else None, text, append=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
