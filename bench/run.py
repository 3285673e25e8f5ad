#!/usr/bin/env python
"""lar-prec benchmark (issue 7): `make bench`, or `.venv/bin/python bench/run.py --help`.

Measures, on this machine, whatever parts of lar-prec exist (a missing part is reported as
"not available", never a crash):

1. `lar-prec compare` against `python -m megengine.tools.compare_binary_iodump` on a generated
   dump pair (--size, default 1G = two 500 MB folders), alternating the two tools, median of
   --repeat whole-process wall times, GB/s of dump read, peak RSS;
2. peak memory of `lar-prec compare` on a big pair (--big, default 4G) holding one variable far
   larger than the memory budget;
3. start-up: `lar-prec --help` time, and that neither `--help` nor `compare` imports megengine;
4. rooting a synthetic graph of 20,000 variables (lar_prec.vartree);
5. `lar-prec naive-vs-default` on the `resnet` case: the analysis time on top of the two
   load_and_run processes.

It writes --out (default bench/RESULTS.md) with the machine, the date, every number and its
target. Timings are of a warm page cache: every command runs once untimed first (dropping the
cache needs root and disturbs everything else on the machine).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# the pieces: procs (child processes), sections (what is measured), results (RESULTS.md)
from gen import PairInfo, PairSpec, generate_pair  # noqa: E402
from procs import LAR, _ok  # noqa: E402
from results import _pair_line, ensure_bytecode, machine_info, render, targets  # noqa: E402
from sections import (  # noqa: E402,F401  (parse_size: tests/test_bench.py reads it here)
    CHAIN_VARS,
    ROOTING_VARS,
    Section,
    _fmt_bytes,
    bench_compare,
    bench_profile_many,
    bench_memory,
    NVD_CASES,
    bench_nvd,
    bench_rooting,
    bench_startup,
    get_pair,
    parse_size,
)


# ------------------------------------------------------------------ main


#: timed runs of each lar-prec row of the many-variable pair (its per-var time and auto/fixed ratio are targets)
PAIR_REPEAT = 7


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line; --quick shrinks every default size."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="main pair size, both folders together (default 1G = 2 x 500 MB)")
    ap.add_argument("--big", default="4G", help="memory-check pair size (default 4G; 0 to skip)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per tool (default 3)")
    ap.add_argument("--vars", type=int, default=400, help="variables per folder (default 400)")
    ap.add_argument("--divergent", type=float, default=0.5, help="share of divergent variables (default 0.5)")
    ap.add_argument("--many-vars", type=int, default=20_000,
                    help="variables of the many-small-variables pair (default 20000; 0 skips it)")
    ap.add_argument("--rooting-vars", type=int, default=ROOTING_VARS, help="graph size for the rooting benchmark")
    ap.add_argument("--chain-vars", type=int, default=CHAIN_VARS,
                    help="depth of the chain whose root's path is measured (default 50000; 0 skips it)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes, each command run once (no warm-up): proves the script works (tests)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"), help="report file (default bench/RESULTS.md)")
    ap.add_argument("--json", default=None, help="also write the raw numbers as JSON here")
    ap.add_argument("--data", default=str(ROOT / "bench" / "data"), help="where pairs are generated (default bench/data)")
    ap.add_argument("--keep", action="store_true", help="keep generated pairs (and reuse kept ones with the same spec)")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: compare,memory,many,startup,rooting,nvd,megengine")
    ap.add_argument("--before", default=None, metavar="DIR",
                    help="a checkout of an earlier lar-prec (its C kernel built, e.g. `git worktree add` then "
                         "`python setup.py build_ext --inplace` there), timed beside this one on the main and the "
                         "many-variable pairs (rows `... (before)`)")
    args = ap.parse_args(argv)
    args.argv = ["bench/run.py", *(argv if argv is not None else sys.argv[1:])]
    if args.quick:
        args.size = "8M" if args.size == "1G" else args.size
        args.big = "16M" if args.big == "4G" else args.big
        args.repeat = 0 if args.repeat == 3 else args.repeat  # the warm-up run is the only run
        args.vars = 60 if args.vars == 400 else args.vars
        args.rooting_vars = 2000 if args.rooting_vars == ROOTING_VARS else args.rooting_vars
        args.chain_vars = 2000 if args.chain_vars == CHAIN_VARS else args.chain_vars
        args.many_vars = 300 if args.many_vars == 20_000 else args.many_vars
    return args


def measure(args: argparse.Namespace, skip: set, have_lar: bool, have_mge: bool
            ) -> "tuple[Dict[str, PairInfo], Dict[str, Section]]":
    """Run every section not skipped; generated pairs are deleted unless --keep."""
    size, big = parse_size(args.size), parse_size(args.big)
    data_root = Path(args.data)
    data_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lar-prec-bench-"))
    pairs: Dict[str, PairInfo] = {}
    sections: Dict[str, Section] = {}
    made: List[Path] = []
    try:
        # a two-variable pair for the import check
        tiny = generate_pair(work / "tiny", PairSpec(total_bytes=200_000, n_vars=4, divergent_share=0.5))
        if "compare" not in skip:
            print(f"[1] compare on a {_fmt_bytes(size)} pair", flush=True)
            root = data_root / f"pair-{args.size}"
            made.append(root)
            pairs["main"] = get_pair(root, PairSpec(total_bytes=size, n_vars=args.vars,
                                                     divergent_share=args.divergent), args.keep)
            print(f"  {_pair_line(pairs['main'])}", flush=True)
            sections["compare"] = bench_compare(pairs["main"], work, args.repeat, have_lar, have_mge, warm=True,
                                                before=args.before)
        if big and "memory" not in skip:
            print(f"[2] peak memory on a {_fmt_bytes(big)} pair", flush=True)
            root = data_root / f"pair-{args.big}-big"
            made.append(root)
            # one variable of a quarter of a folder: far beyond the memory budget at full size
            pairs["big"] = get_pair(root, PairSpec(total_bytes=big, n_vars=args.vars, divergent_share=args.divergent,
                                                    megengine_compatible=False, largest_var_bytes=big // 8,
                                                    seed=7), args.keep)
            print(f"  {_pair_line(pairs['big'])}", flush=True)
            sections["memory"] = bench_memory(pairs["big"], work, have_lar)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        if args.many_vars and "many" not in skip:
            print(f"[2b] compare on {args.many_vars:,} small variables", flush=True)
            root = data_root / f"pair-{args.many_vars}-vars"
            made.append(root)
            # about 8 KB per variable and folder: the per-variable cost dominates
            pairs["many"] = get_pair(root, PairSpec(total_bytes=args.many_vars * 16_000, n_vars=args.many_vars,
                                                     divergent_share=args.divergent, seed=11), args.keep)
            print(f"  {_pair_line(pairs['many'])}", flush=True)
            sections["many"] = bench_compare(pairs["many"], work, args.repeat, have_lar, have_mge, warm=True, name="many",
                                             variants=False, before=args.before,
                                             pair_repeat=PAIR_REPEAT)
            if have_lar:
                print("[2c] where the time goes on the many-variable pair", flush=True)
                sections["profile-many"] = bench_profile_many(pairs["many"], work, args.repeat)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        if "startup" not in skip:
            print("[3] start-up", flush=True)
            sections["startup"] = bench_startup(tiny, args.repeat, have_lar)
        if "rooting" not in skip:
            print(f"[4] rooting {args.rooting_vars:,} variables", flush=True)
            sections["rooting"] = bench_rooting(args.rooting_vars, args.chain_vars)
        if "nvd" not in skip:
            print("[5] naive-vs-default on resnet", flush=True)
            sections["naive-vs-default"] = bench_nvd(args.repeat, work, warmup=not args.quick,
                                                     cases=("resnet",) if args.quick else NVD_CASES)
    finally:
        if not args.keep:
            for root in made:
                shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    return pairs, sections


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    skip = {x.strip() for x in args.skip.split(",") if x.strip()}

    t_start = time.perf_counter()
    started = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    machine = machine_info()
    print(f"lar-prec benchmark: {machine['cpu']}, {machine['cores']} cores, {machine['ram']}", flush=True)
    machine["bytecode"] = ensure_bytecode()
    have_lar = _ok(LAR + ["compare", "--help"])
    have_mge = "megengine" not in skip and importlib.util.find_spec("megengine") is not None
    print(f"  lar-prec compare: {'available' if have_lar else 'not available'}; "
          f"megengine compare_binary_iodump: {'available' if have_mge else 'not available'}", flush=True)

    pairs, sections = measure(args, skip, have_lar, have_mge)
    try:
        machine["load_end"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        pass
    rows = targets(sections)
    total_s = time.perf_counter() - t_start
    text = render(args, machine, pairs, sections, rows, started, total_s)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": machine, "started": started, "seconds": total_s, "quick": args.quick,
            "pairs": {k: asdict(v) for k, v in pairs.items()},
            "sections": {k: asdict(v) for k, v in sections.items()},
            "targets": rows,
        }, indent=1, default=str) + "\n")
    print()
    print("| target | measured | goal | result |")
    for r in rows:
        print(f"| {r['target']} | {r['shown']} | {r['goal']} | {r['result']} |")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
