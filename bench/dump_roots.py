#!/usr/bin/env python
"""Dump-only roots by error growth (issue 20 #4): false roots and faults found, per option.

    .venv/bin/python bench/dump_roots.py --sites 0 --options default    # every case and option
    .venv/bin/python bench/dump_roots.py --cases resnet,longred --sites 4 --out /tmp/R.md

For each float32 case, the bundled load_and_run runs the model under the reference kernels
(naive) and under each option: default, reproducible, fast-run, and fast-run with each
Winograd tile forced (F(2,3), F(4,3), F(6,3): the run's own --fast-run-algo-policy cache
reordered, ``lar_prec.dumps.algocache.prefer_algorithms``) where the case has a 3x3
convolution. Each profiled run gets a run.json beside its dump saying it ran --fast-run, as
``lar-prec run`` writes it, so the comparison knows it profiled. ``--options default`` adds
every option of the sweep's default set (layouts, float16, fusions, runtime switches), each
run naive and default under it as ``naive-vs-default MODEL -- FLAGS`` runs it; an option
MegEngine refuses for a case is listed as not run.

* clean: ``compare_folders(naive, option)``, its roots (any is a false root) and the largest
  ``norm_err / explained`` of the edge rule (below 1: no root; the margin left).
* faults: a copy of the option's dump with one computed var, and everything downstream of
  it, multiplied by 1 + size (``tests/compare_helpers.inject_fault``: the tests inject the
  same way), for ``--sites`` vars spread over the graph and each size; *found* when the
  first root is that var.

Prints one line per case and option and the tables; writes them to ``--out``. Nothing is
asserted. No model is needed by the comparison: this is what ``lar-prec compare A B`` decides.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from harness import BUILD, ROOT, Table, cases, cpu_name, write  # (first: this checkout's lar_prec on the path)

sys.path.insert(0, str(ROOT / "tests"))

from procs import RunFailed, dump_run  # noqa: E402
from compare_helpers import computed_float_vars, inject_fault, pick_spread  # noqa: E402
from lar_prec.compare.folders import compare_folders  # noqa: E402
from lar_prec.compare.growth import grow  # noqa: E402
from lar_prec.diagnosis.tree import VarTree  # noqa: E402
from lar_prec.dumps.algocache import prefer_algorithms  # noqa: E402
from lar_prec.dumps.folder import DumpFolder  # noqa: E402
from lar_prec.run.config import get_config  # noqa: E402
from lar_prec.workflows.sweep.options import parse_options  # noqa: E402

CASES = ("cnn", "resnet", "mlp", "attention", "multi_input", "fastrun_shake", "shufflenet", "longred", "amplify")
SIZES = (1e-3, 1e-4, 1e-5)
WINOGRAD_TILES = (":4:2:", ":4:4:", ":4:6:")  # F(2,3), F(4,3), F(6,3) of MegEngine's MK4 names


def run(model: Path, inputs: List[str], out: Path, cfg, cwd: Path) -> Path:
    """One watched bundled run with a binary dump in ``out/dump``, and ``out/run.json`` holding
    its argv as ``lar-prec run`` writes it (the comparison reads --fast-run from it)."""
    dump = dump_run(model, inputs, out / "dump", cfg, cwd)
    (out / "run.json").write_text(json.dumps({"argv": [sys.executable, "-m", "lar_prec.lar", *cfg.flags]}))
    return dump


def margin(naive: Path, other: Path) -> Tuple[Tuple[int, ...], float]:
    """(roots, largest norm_err / explained) of a pair."""
    c = compare_folders(naive, other)
    roots = VarTree(c.diffs, comparison=c).root_ids()
    profiled = "--fast-run" in json.loads((other.parent / "run.json").read_text())["argv"]
    _, g = grow(list(c.diffs), c.threshold, profiled=profiled)
    worst = 0.0
    if g is not None:
        errs = {d.id: d.norm_err for d in c.diffs if d.norm_err is not None}
        worst = max((errs.get(v, 0.0) / e for v, e in g.explained.items() if e > 0), default=0.0)
    return roots, worst


def faults(naive: Path, other: Path, work: Path, sites: int, sizes: Tuple[float, ...],
           clean_roots: Tuple[int, ...] = ()) -> Dict[float, List[bool]]:
    """Found per size: the first root the clean pair did not have is the faulted var (a
    clean pair under an option may have real roots: cnn's float16 max pooling under ioc16)."""
    folder = DumpFolder(other)
    victims = computed_float_vars(folder)
    if sites:
        victims = list(pick_spread(victims, sites))
    out: Dict[float, List[bool]] = {}
    for size in sizes:
        for v in victims:
            dst = work / f"{size:g}-{v}"
            inject_fault(other, dst / "dump", v, size)
            shutil.copy(other.parent / "run.json", dst / "run.json")
            c = compare_folders(naive, dst / "dump")
            roots = VarTree(c.diffs, comparison=c).root_ids()
            new = [r for r in roots if r not in clean_roots or r == v]
            out.setdefault(size, []).append(bool(new) and new[0] == v)
            shutil.rmtree(dst)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--sites", type=int, default=8, help="faulted vars per case and option, spread (0: all)")
    ap.add_argument("--sizes", default=",".join(f"{s:g}" for s in SIZES))
    ap.add_argument("--no-winograd", action="store_true", help="skip the forced Winograd runs")
    ap.add_argument("--options", default="none",
                    help="sweep options too, each naive and default under it (comma-separated names, 'default': "
                         "the sweep's default set of this CPU, 'none')")
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS-dump-roots.md"))
    args = ap.parse_args(argv)
    sizes = tuple(float(s) for s in args.sizes.split(","))
    build = BUILD
    manifest = cases()
    work = Path(tempfile.mkdtemp(prefix="lar-prec-dump-roots-"))
    t0 = time.monotonic()
    rows: List[Tuple[str, str, int, float, Dict[float, List[bool]]]] = []
    try:
        for name in args.cases.split(","):
            case = manifest[name]
            model, inputs, base = case.model, case.input_specs(), work / name
            plain_naive = run(model, inputs, base / "naive", get_config("naive"), build)
            cache = base / "algo.cache"
            options = [("default", get_config("default"), None), ("reproducible", get_config("reproducible"), None),
                       ("fast-run", get_config("fast-run").with_extra(["--fast-run-algo-policy", str(cache)]), None)]
            # each sweep option as `naive-vs-default MODEL -- FLAGS` runs it: both sides rewritten
            # float16 options: faults 100x larger (1e-3 is one float16 ulp), the label says so
            options += [(o.name + (" (faults x100)" if o.fp16 else ""), get_config("default").with_extra(o.flags),
                         get_config("naive").with_extra(o.flags))
                        for o in parse_options(None if args.options == "default" else args.options)] if args.options != "none" else []
            for label, cfg, naive_cfg in options:
                try:
                    naive = plain_naive if naive_cfg is None else run(model, inputs, base / f"naive-{label}", naive_cfg, build)
                    other = run(model, inputs, base / label, cfg, build)
                except RunFailed as exc:
                    print(f"{name:13s} {label:18s} did not run: {str(exc)[:160]}", flush=True)
                    rows.append((name, label, -1, 0.0, {"why": str(exc)}))  # type: ignore[dict-item]
                    continue
                if label == "fast-run" and not args.no_winograd and cache.is_file():
                    for tile in WINOGRAD_TILES:
                        forced = prefer_algorithms(cache, base / f"forced{tile.strip(':')}.cache", tile)
                        wcfg = get_config("fast-run").with_extra(["--fast-run-algo-policy", str(forced)])
                        options.append((f"fast-run F({tile.split(':')[2]},3)", wcfg, None))
                roots, worst = margin(naive, other)
                found = faults(naive, other, base / f"faults-{label.split()[0]}", args.sites,
                               tuple(x * 100 for x in sizes) if label.endswith("(faults x100)") else sizes, roots)
                if label.endswith("(faults x100)"):
                    found = {s0: found[s0 * 100] for s0 in sizes}  # reported in the size columns
                rows.append((name, label, len(roots), worst, found))
                cells = "  ".join(f"{s:g}: {sum(f)}/{len(f)}" for s, f in found.items())
                print(f"{name:13s} {label:18s} false roots {len(roots)}  worst/explained {worst:.2f}  found {cells}",
                      flush=True)
                shutil.rmtree(other.parent)
                if naive is not plain_naive:
                    shutil.rmtree(naive.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(rows, sizes, args, time.monotonic() - t0)
    write(Path(args.out), text, show=False)
    print("\n" + text)
    return 0


def report(rows, sizes, args, seconds: float) -> str:
    cpu = cpu_name(platform.machine()) or platform.machine()
    lines = [
        "# Dump-only roots by error growth: false roots and faults found (issue 20 #4)", "",
        f"Written by `bench/dump_roots.py --cases {args.cases} --sites {args.sites} --sizes {args.sizes}` on "
        f"{datetime.date.today()} ({cpu}, {seconds / 60:.1f} min). Do not edit by hand.", "",
        "A fault of size s: one var, and everything downstream of it, times 1 + s in a copy of the option's "
        "dump; found = the first root the clean pair did not have is that var. worst/explained: the largest "
        "norm_err over what its inputs and operator explain on the clean pair (below 1: no root). A root on a "
        "clean pair is false unless MegEngine's own kernel is wrong there (cnn under ioc16: the float16 max "
        "pooling, local error 1 against a floor of 0.003; see tests/workflows/test_fp16_roots.py).", "",
    ]
    by_option = Table("option", "pairs", "pairs with a root", "worst/explained", *(f"found at {s:g}" for s in sizes))
    for opt in dict.fromkeys(r[1] for r in rows):
        rs = [r for r in rows if r[1] == opt]
        cells = []
        for s in sizes:
            fs = [x for r in rs for x in r[4].get(s, [])]
            cells.append(f"{sum(fs)}/{len(fs)}")
        ran = [r for r in rs if r[2] >= 0]
        failed = f" ({len(rs) - len(ran)} did not run)" if len(ran) < len(rs) else ""
        by_option.row(opt, f"{len(ran)}{failed}", sum(1 for r in ran if r[2]), f"{max((r[3] for r in ran), default=0.0):.2f}",
                      *cells)
    by_case = Table("case", "option", "roots (clean pair)", "worst/explained", *(f"{s:g}" for s in sizes))
    for name, opt, n, worst, found in rows:
        if n < 0:
            why = str(found.get("why", "")).replace("|", "/")[:120]
            by_case.row(name, opt, f"did not run: {why}", None, *("" for _ in sizes))
            continue
        by_case.row(name, opt, n, f"{worst:.2f}", *(f"{sum(found.get(s, []))}/{len(found.get(s, []))}" for s in sizes))
    lines += [*by_option.lines(), "", "Per case:", "", *by_case.lines()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
