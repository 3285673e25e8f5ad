#!/usr/bin/env python
"""Profile ``lar_prec.compare.compare_folders`` in-process on a generated pair.

    .venv/bin/python bench/profile_compare.py [--size 1G] [--jobs 1] [--top 25] [--keep]

Prints wall time and GB/s per ``jobs`` value, the cProfile top functions (jobs=1 only: the
profiler sees one thread), and the time split by dtype. For whoever tunes compare.py; the
numbers are in-process, so they leave out the ~0.3 s of interpreter and import start-up that
`bench/run.py` includes.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gen import PairSpec  # noqa: E402
from run import get_pair, parse_size  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1G")
    ap.add_argument("--vars", type=int, default=400)
    ap.add_argument("--jobs", default="1,2", help="comma list of jobs values to time (default 1,2)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--data", default=str(ROOT / "bench" / "data"))
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the pair")
    args = ap.parse_args()
    try:
        from lar_prec.compare.folders import compare_folders
    except ImportError as e:
        print(f"lar_prec.compare is not available: {e}")
        return 2
    root = Path(args.data) / f"pair-{args.size}"
    pair = get_pair(root, PairSpec(total_bytes=parse_size(args.size), n_vars=args.vars), keep=True)
    total = pair.total_bytes
    try:
        compare_folders(pair.dir_a, pair.dir_b, threshold=1e-3)  # warm the page cache
        for jobs in [int(j) for j in args.jobs.split(",")]:
            t0 = time.perf_counter()
            c = compare_folders(pair.dir_a, pair.dir_b, threshold=1e-3, jobs=jobs)
            dt = time.perf_counter() - t0
            print(f"jobs={jobs}: {dt:.3f} s, {total / 1e9 / dt:.2f} GB/s, "
                  f"{sum(1 for d in c if d.status != 'ok')} not ok of {len(c)}")
        # time per dtype, jobs=1: the vars of one dtype linked into their own folder pair
        import tempfile

        from lar_prec.dumps.folder import DumpFolder

        fa = DumpFolder(pair.dir_a)
        by_dtype: dict = {}
        for v in fa.ids:
            by_dtype.setdefault(fa[v].dtype.name, []).append(fa[v])
        print("per dtype (jobs=1, each dtype as its own folder pair):")
        with tempfile.TemporaryDirectory() as tmp:
            for name, dumps in sorted(by_dtype.items(), key=lambda x: -sum(d.nbytes for d in x[1])):
                da, db = Path(tmp, name, "a"), Path(tmp, name, "b")
                da.mkdir(parents=True)
                db.mkdir(parents=True)
                for d in dumps:
                    (da / d.path.name).symlink_to(d.path)
                    (db / d.path.name).symlink_to(Path(pair.dir_b) / d.path.name)
                nbytes = sum(2 * d.nbytes for d in dumps)
                t0 = time.perf_counter()
                compare_folders(da, db, threshold=1e-3, jobs=1)
                dt = time.perf_counter() - t0
                print(f"  {name:8s} {len(dumps):4d} vars {nbytes / 1e6:9.1f} MB {dt:7.3f} s {nbytes / 1e9 / dt:6.2f} GB/s")
        prof = cProfile.Profile()
        prof.enable()
        compare_folders(pair.dir_a, pair.dir_b, threshold=1e-3, jobs=1)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
        print(out.getvalue())
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
