#!/usr/bin/env python
"""Store scale benchmark (issue 36 #6): a store of RUNS runs x OPS operators (default 10,000 x
500, one series, errors with jitter and a step), filled through Store.write_many (``--batch``
runs per transaction, each table in one executemany: the fill is not what is measured), then the
history queries timed (median of 3, warm):

* runs of a model over time (``Store.runs(model=...)``);
* an operator's error over builds (``Store.op_history``) and the first run where it left its
  band (``workflows.history._first_out`` over those rows);
* what changed between two runs (``workflows.history._diff``);
* ``lar-prec check``'s reads and rule for the newest run (``workflows.history.check``).

Target: each < 1 s. SQLite by default; ``--postgres`` starts a private PostgreSQL server as the
tests do (tests/pg_server.py; scripts/ensure-postgres.sh installs it) and fills a new database
there; ``--url postgresql://...`` uses a server of yours.

Usage: .venv/bin/python bench/store_scale.py [--runs 10000] [--ops 500] [--postgres | --url URL] [--out FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))

from lar_prec.store.db import open_store  # noqa: E402
from lar_prec.store.summary import OpSummary, RunSummary, Summary  # noqa: E402
from lar_prec.workflows.history import _diff, _first_out, check  # noqa: E402
from pg_server import new_database, private_postgres  # noqa: E402


def summary(k: int, n_ops: int, rng: random.Random) -> Summary:
    run = RunSummary(uid=f"{k:08d}" + "0" * 24, created=f"2026-01-01T00:00:00+00:00#{k:06d}", command="naive-vs-default",
                     config="fast-run", options=("--fast-run",), seed=0, lar_prec_version="0.1.0",
                     lar_path="/opt/lar/load_and_run", lar_sha256=f"{k // 10:064x}", lar_version=f"build {k // 10}",
                     megengine_version="1.13.0", host="local", device="local AMD EPYC x86_64",
                     device_kind="AMD EPYC x86_64", cpu_model="AMD EPYC", cpu_features=("avx2", "fma"),
                     model_name="model.mge", model_sha256="m" * 64, input_sha256="i" * 64, verdict="ok", exit_code=0,
                     n_vars=n_ops, n_not_ok=0, n_roots=0, output_err=1e-6, analysis_dir=f"/runs/{k}")
    ops = tuple(OpSummary(part="", op_key=f"n/op{j}", var_id=j, name=f"op{j}", opr_type="ConvolutionForward",
                          dtype="Float32", shape="1x64x56x56", status="ok",
                          max_err=1e-6 * (1 + 0.1 * rng.random()) * (10 if j == 7 and k > 9000 else 1),
                          local_err=1e-7, floor=1e-6, inputs=(f"n/op{j - 1}",) if j else ()) for j in range(n_ops))
    return Summary(run, ops)


def timed(fn, repeat: int = 3) -> float:
    fn()
    return statistics.median([_once(fn) for _ in range(repeat)])


def _once(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--ops", type=int, default=500)
    ap.add_argument("--batch", type=int, default=100, help="runs per transaction of the fill")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--url", default=None, help="a store URL (default: a new SQLite file under tmp)")
    where.add_argument("--postgres", action="store_true", help="a private PostgreSQL server, started and stopped here")
    ap.add_argument("--out", type=Path, default=None, help="also append the Markdown table here")
    args = ap.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = args.url
        if args.postgres:
            url = new_database(stack.enter_context(private_postgres()))
        elif url is None:
            url = str(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lar-prec-store-"))) / "results.db")
        text = bench(url, args)
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text + "\n")
    return 0


def bench(url: str, args: argparse.Namespace) -> str:
    """Fill the store at ``url`` (unless it holds runs), time the queries: the Markdown table."""
    rng = random.Random(0)
    t0 = time.perf_counter()
    with open_store(url) as st:
        filled = not st.runs(limit=1)
        if filled:
            for start in range(0, args.runs, args.batch):
                st.write_many([summary(k, args.ops, rng) for k in range(start, min(start + args.batch, args.runs))])
        fill = time.perf_counter() - t0
        runs = st.runs()
        series, a, b = runs[-1]["series"], runs[100]["uid"], runs[-1]["uid"]
        results = {
            "runs of the model over time": timed(lambda: st.runs(model="model.mge")),
            "op7's error over builds": timed(lambda: st.op_history(series, "n/op7")),
            "first run where op7 left its band": timed(lambda: _first_out(st.op_history(series, "n/op7"), 0.0)),
            "what changed between two runs": timed(lambda: _diff(st, [a, b])),
        }
    results["check of the newest run (open, read, judge)"] = timed(lambda: check(url), repeat=1)
    dialect = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
    how = (f"filled in {fill:.0f} s ({args.batch} runs per transaction)" if filled else "the store was filled before")
    lines = [f"# Store scale: {len(runs)} runs x {args.ops} operators on {dialect} (issue 36 #6)", "",
             f"`bench/store_scale.py`, {time.strftime('%Y-%m-%d')}; {how}. Median of 3 warm runs (check: 1).", "",
             "| query | seconds | target < 1 s |", "|---|---|---|"]
    lines += [f"| {k} | {v:.3f} | {'PASS' if v < 1 else 'FAIL'} |" for k, v in results.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
