"""Floors from each operator's own arithmetic (issues 34 and 51): false roots on clean models.

    PYTHONPATH=. .venv/bin/python bench/floors.py --out bench/RESULTS-floors.md
    PYTHONPATH=. .venv/bin/python bench/floors.py --cases vit,cnn --options nchw44     # a part

For every float case of ``cases/`` and every configuration a user deploys (default,
reproducible, fast-run pinned by its own algorithm cache) and every x86 option of a sweep under
the default kernels, the clean model runs once more against the naive reference; then:

* local error (the layerwise model fed the reference's values, under that configuration): the
  largest difference of any operator with a bound (every rule of ``lar_prec/oprules.py``) in
  rounding units, worst element and whole-output scale (:mod:`lar_prec.compare.bounds`;
  ``TERMS_C`` = 1.5 is the allowance), the distribution tests of sums of terms (issue 57: the
  largest ``units_rms``, channel chi2 and fraction above one unit, each over its limit from the
  rounding model: a clean model stays below 1), the operators not judged and why, and the local roots
  (``noise_floors`` with the option's compute dtype): a clean model must have none;
* dump-only (``lar-prec compare`` of the two dumps, no model): its roots, likewise none.

An option that does not load, crashes or stalls on this CPU is listed as such (that is a finding
of the sweep, not a floor). Prints one line per run and writes the table; nothing is asserted.
"""
from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from harness import BUILD, Table, cases as built_cases, write  # (first: this checkout's lar_prec on the path)
from lar_prec.compare.bounds import TERMS_C  # noqa: E402
from lar_prec.diagnosis.floors import local_roots, noise_floors  # noqa: E402
from lar_prec.compare.folders import compare_folders  # noqa: E402
from lar_prec.diagnosis.local import build_layerwise, layout_fmt, local_errors  # noqa: E402
from lar_prec.diagnosis.local_bounds import compute_dtype  # noqa: E402
from lar_prec.diagnosis.tree import VarTree  # noqa: E402
from lar_prec.run.config import get_config  # noqa: E402
from lar_prec.workflows.sweep.options import DEFAULT_OPTIONS, OPTIONS  # noqa: E402
from procs import RunFailed, dump_run  # noqa: E402  (bench/ is sys.path[0] when run as a script)

CASES = ("cnn", "resnet", "mlp", "attention", "multi_input", "shufflenet", "longred", "fastrun_shake", "vit",
         "mobilenetv3", "gru_topk", "unet", "dethead", "lstm_lm", "swin", "effnet_lite", "resnet18")
CONFIGS = ("default", "reproducible", "fast-run")


def _cells(case: str, setting: str, res, flags) -> tuple:
    judged = [v.bound for v in res.vars if v.bound is not None]
    worst = max((b.units for b in judged), default=0.0)
    scale = max((b.scale_units for b in judged), default=0.0)
    verdict = local_roots(res, noise_floors(res, compute_dtype(flags)))
    roots = verdict.roots
    # the distribution tests (issue 57): each operator's statistic over its limit, the largest
    lims = [b.spread.limits() for b in judged if b.spread is not None]
    rms = max((x.rms / x.rms_limit for x in lims if x.rms_limit > 0), default=0.0)
    chi = max((x.chi2 / x.chi2_limit for x in lims if x.chi2_limit > 0), default=0.0)
    above = max((x.above / x.above_limit for x in lims if x.above_limit > 0), default=0.0)
    by_spread = sum(1 for r in roots if "worst_element" not in r.tests)
    named = ", ".join(r.name for r in roots[:3]) + (" ..." if len(roots) > 3 else "")
    kinds = sorted({b.kind for b in judged})
    nj = sorted({w for w in verdict.not_judged.values()})
    return (case, setting, f"{len(judged)} ({', '.join(kinds)})", f"{worst:.3f}", f"{scale:.3f}",
            f"{len(lims)}: {rms:.3f}, {chi:.3f}, {above:.3f}",
            f"{len(verdict.not_judged)}{' (' + '; '.join(nj)[:80] + ')' if nj else ''}",
            f"{len(roots)}{' (' + named + ')' if roots else ''}{f' [{by_spread} by distribution]' if by_spread else ''}")


def dump_only_cells(case: str, setting: str, ref, test, flags) -> tuple:
    """``lar-prec compare REF TEST`` as a user runs it: pairing auto (by id for one graph, by name
    with the option's packed layout brought back for a rewritten one); its roots and pairing."""
    cmp = compare_folders(str(ref), str(test), pairing="auto", layout_format=layout_fmt(flags), jobs=1)
    roots = VarTree.from_comparison(cmp).roots()
    named = ", ".join(f"{r.name} ({r.status})" for r in roots[:3]) + (" ..." if len(roots) > 3 else "")
    return case, setting, cmp.pairing, f"{len(roots)}{' (' + named + ')' if roots else ''}"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--options", default=",".join(DEFAULT_OPTIONS["x86"]))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = ap.parse_args(argv)
    cases = built_cases()
    build = BUILD
    work = Path(tempfile.mkdtemp(prefix="lar-prec-floors-"))
    t0 = time.monotonic()
    local = Table("case", "configuration", "operators with a bound (kinds)", "worst element (units)",
                  "whole-output scale (units)", "distribution tests: n ops, largest rms, chi2, above-one over limit",
                  "not judged", "local roots")
    dump_only = Table("case", "configuration", "pairing", "roots")
    failed = Table("case", "configuration", "why")
    for name in args.cases.split(","):
        case = cases[name]
        model, inputs = case.model, case.input_specs()
        base = work / name
        ref = dump_run(model, inputs, base / "naive", get_config("naive"), build, timeout=args.timeout)
        lw = build_layerwise(model, ref, base / "layerwise")
        settings = [(c, get_config(c)) for c in CONFIGS]
        settings += [(o, get_config("default").with_extra(OPTIONS[o].flags)) for o in args.options.split(",") if o]
        for setting, cfg in settings:
            if setting == "fast-run":  # pinned by its own cache, as naive-vs-default pins it
                cfg = cfg.with_extra(["--fast-run-algo-policy", str(base / "algo.cache")])
            try:
                test = dump_run(model, inputs, base / setting, cfg, build, timeout=args.timeout)
                res = local_errors(model, ref, cfg, out_dir=base / f"local-{setting}", test_dump=test, checks=False,
                                   layerwise=lw)
            except (RunFailed, Exception) as exc:  # noqa: BLE001 (a finding per option, the bench goes on)
                failed.row(name, setting, str(exc).splitlines()[0][:120])
                print(f"{name:12s} {setting:28s} did not run: {exc}", flush=True)
                continue
            print(local.row(*_cells(name, setting, res, cfg.flags)),
                  dump_only.row(*dump_only_cells(name, setting, ref, test, cfg.flags)), flush=True)
    elapsed = time.monotonic() - t0
    text = "\n".join([
        "# Floors from each operator's own arithmetic: clean models (bench/floors.py)", "",
        f"Machine: {platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}; {elapsed:.0f} s. "
        f"Allowance: TERMS_C = {TERMS_C:g} rounding units (worst element, and the whole output's scale).", "",
        "## Local error (with the model)", "", *local.lines(), "",
        "## Dump-only (compare, no model)", "", *dump_only.lines(), "",
        "## Did not run on this CPU", "", *failed.lines(), ""])
    write(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
