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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# the pieces: procs (child processes), sections (what is measured), targets (the goals, as data),
# results (RESULTS.md); PARTS below lists the sections
from gen import PairInfo, PairSpec, generate_pair  # noqa: E402
from procs import LAR, _ok  # noqa: E402
from results import _pair_line, ensure_bytecode, machine_info, render  # noqa: E402
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
from targets import targets  # noqa: E402


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


class Bench:
    """One run of the benchmark: its options, what is available, the pairs it generated."""

    def __init__(self, args: argparse.Namespace, have_lar: bool, have_mge: bool, work: Path) -> None:
        self.args, self.have_lar, self.have_mge, self.work = args, have_lar, have_mge, work
        self.size, self.big = parse_size(args.size), parse_size(args.big)
        self.pairs: Dict[str, PairInfo] = {}
        self.made: Dict[str, Path] = {}

    def pair(self, key: str, folder: str, spec: PairSpec) -> PairInfo:
        """The pair ``key`` in ``--data``/``folder`` (generated, or kept by an earlier ``--keep``)."""
        root = Path(self.args.data) / folder
        self.made[key] = root
        self.pairs[key] = get_pair(root, spec, self.args.keep)
        print(f"  {_pair_line(self.pairs[key])}", flush=True)
        return self.pairs[key]

    def drop(self, key: str) -> None:
        """Delete the pair ``key`` once its sections ran (unless --keep): the big ones take GBs."""
        if not self.args.keep:
            shutil.rmtree(self.made[key], ignore_errors=True)


@dataclass(frozen=True)
class Part:
    """A section of the benchmark as data: its name in the report, its ``--skip`` name, when it
    runs, the line it prints and what it measures (the pairs it needs made by ``Bench.pair``);
    ``drop``: the pair deleted at its place in the order, whether it ran or not."""

    name: str
    skip: str
    runs: Callable[[Bench], bool]
    title: Callable[[Bench], str]
    measure: Callable[[Bench], Section]
    drop: Optional[str] = None


def _main_pair(b: Bench) -> Section:
    a = b.args
    pair = b.pair("main", f"pair-{a.size}", PairSpec(total_bytes=b.size, n_vars=a.vars, divergent_share=a.divergent))
    return bench_compare(pair, b.work, a.repeat, b.have_lar, b.have_mge, warm=True, before=a.before)


def _big_pair(b: Bench) -> Section:
    a = b.args
    # one variable of a quarter of a folder: far beyond the memory budget at full size
    pair = b.pair("big", f"pair-{a.big}-big", PairSpec(total_bytes=b.big, n_vars=a.vars, divergent_share=a.divergent,
                                                        megengine_compatible=False, largest_var_bytes=b.big // 8, seed=7))
    return bench_memory(pair, b.work, b.have_lar)


def _many_pair(b: Bench) -> Section:
    a = b.args
    # about 8 KB per variable and folder: the per-variable cost dominates
    pair = b.pair("many", f"pair-{a.many_vars}-vars", PairSpec(total_bytes=a.many_vars * 16_000, n_vars=a.many_vars,
                                                                divergent_share=a.divergent, seed=11))
    return bench_compare(pair, b.work, a.repeat, b.have_lar, b.have_mge, warm=True, name="many", variants=False,
                         before=a.before, pair_repeat=PAIR_REPEAT)


#: the sections, in the order they run and the report shows them
PARTS = (
    Part("compare", "compare", lambda b: True, lambda b: f"[1] compare on a {_fmt_bytes(b.size)} pair", _main_pair),
    Part("memory", "memory", lambda b: bool(b.big), lambda b: f"[2] peak memory on a {_fmt_bytes(b.big)} pair",
         _big_pair, drop="big"),
    Part("many", "many", lambda b: bool(b.args.many_vars), lambda b: f"[2b] compare on {b.args.many_vars:,} small variables",
         _many_pair),
    Part("profile-many", "many", lambda b: bool(b.args.many_vars) and b.have_lar,
         lambda b: "[2c] where the time goes on the many-variable pair",
         lambda b: bench_profile_many(b.pairs["many"], b.work, b.args.repeat), drop="many"),
    # start-up's compare runs on a two-variable pair made for the import check
    Part("startup", "startup", lambda b: True, lambda b: "[3] start-up",
         lambda b: bench_startup(b.pairs["tiny"], b.args.repeat, b.have_lar)),
    Part("rooting", "rooting", lambda b: True, lambda b: f"[4] rooting {b.args.rooting_vars:,} variables",
         lambda b: bench_rooting(b.args.rooting_vars, b.args.chain_vars)),
    Part("naive-vs-default", "nvd", lambda b: True, lambda b: "[5] naive-vs-default on resnet",
         lambda b: bench_nvd(b.args.repeat, b.work, warmup=not b.args.quick,
                             cases=("resnet",) if b.args.quick else NVD_CASES)),
)


def measure(args: argparse.Namespace, skip: set, have_lar: bool, have_mge: bool
            ) -> "tuple[Dict[str, PairInfo], Dict[str, Section]]":
    """Run every section not skipped; generated pairs are deleted unless --keep."""
    Path(args.data).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lar-prec-bench-"))
    b = Bench(args, have_lar, have_mge, work)
    sections: Dict[str, Section] = {}
    try:
        b.pairs["tiny"] = generate_pair(work / "tiny", PairSpec(total_bytes=200_000, n_vars=4, divergent_share=0.5))
        for part in PARTS:
            if part.skip not in skip and part.runs(b):
                print(part.title(b), flush=True)
                sections[part.name] = part.measure(b)
            if part.drop in b.made:
                b.drop(part.drop)
    finally:
        for key in b.made:
            b.drop(key)
        shutil.rmtree(work, ignore_errors=True)
    return {k: v for k, v in b.pairs.items() if k != "tiny"}, sections


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
