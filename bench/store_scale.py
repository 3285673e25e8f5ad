#!/usr/bin/env python
"""Store scale benchmark (issue 36 #6): a store of RUNS runs x OPS operators (default 10,000 x
500, one series, errors with jitter and a step), then the history queries timed (median of 3, warm):

* runs of a model over time (``Store.runs(model=...)``);
* an operator's error over builds (``Store.op_history``) and the first run where it left its
  band (``workflows.history._first_out`` over those rows);
* what changed between two runs (``workflows.history._diff``);
* ``lar-prec check``'s reads and rule for the newest run (``workflows.history.check``).

The fill is not what is measured, so it is quick: the runs through ``Store.write_many`` (one
executemany), the first run's operators as a template, and every other run's operators copied
from it by one ``INSERT ... SELECT`` (SQLAlchemy Core) per ``--batch`` runs, each in its own
transaction, with a deterministic jitter of 10% on every error and, from 90% of the runs on,
op7's error 10x (the step "first run out of its band" finds); then the planner's statistics (ANALYZE;
PostgreSQL: VACUUM ANALYZE, what autovacuum does after a bulk load, so it does not run during the timing).

Target: each < 1 s. SQLite by default; ``--postgres`` starts a private PostgreSQL server as the
tests do (tests/pg_server.py; scripts/ensure-postgres.sh installs it) and fills a new database
there; ``--url postgresql://...`` uses a server of yours (filled unless it holds runs).

Usage: .venv/bin/python bench/store_scale.py [--runs 10000] [--ops 500] [--postgres | --url URL] [--out FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from harness import ROOT, Table, write  # (first: this checkout's lar_prec on the path)

sys.path.insert(1, str(ROOT / "tests"))

from lar_prec.store.db import Store, open_store  # noqa: E402
from lar_prec.store.schema import ops as ops_table, runs as runs_table  # noqa: E402
from lar_prec.store.summary import OpSummary, RunSummary, Summary  # noqa: E402
from lar_prec.workflows.history.history import _diff, _first_out, check  # noqa: E402
from pg_server import new_database, private_postgres  # noqa: E402

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
STEP_OP = 7


def run_summary(k: int, n_ops: int) -> RunSummary:
    """Run k of the series: a new build every 10 runs, one a minute."""
    return RunSummary(uid=f"{k:08d}{os.urandom(12).hex()}", created=(T0 + datetime.timedelta(minutes=k)).isoformat(),
                      command="naive-vs-default", config="default", options=("--fast-run",), seed=0,
                      lar_prec_version="0.1.0", lar_path="/opt/lar/load_and_run", lar_sha256=f"{k // 10:064x}",
                      lar_version=f"build {k // 10}", megengine_version="1.13.0", host="local",
                      device="local AMD EPYC x86_64", device_kind="AMD EPYC x86_64", cpu_model="AMD EPYC",
                      cpu_features=("avx2", "fma"), model_name="model.mge", model_sha256="m" * 64,
                      input_sha256="i" * 64, verdict="ok", exit_code=0, n_vars=n_ops, n_not_ok=0, n_roots=0,
                      output_err=1e-6, analysis_dir=f"/runs/{k}")


def template(n_ops: int) -> tuple:
    """The operator rows of the first run: a chain of convolutions."""
    return tuple(OpSummary(part="", op_key=f"n/op{j}", var_id=j, name=f"op{j}", opr_type="ConvolutionForward",
                           dtype="Float32", shape="1x64x56x56", status="ok", max_err=1e-6, local_err=1e-7, floor=1e-6,
                           inputs=(f"n/op{j - 1}",) if j else ()) for j in range(n_ops))


def fill(st: Store, n_runs: int, n_ops: int, batch: int) -> None:
    """The runs, the first run's operators, then every other run's copied from them."""
    ids = st.write_many([Summary(run_summary(0, n_ops), template(n_ops))])
    for start in range(1, n_runs, batch):
        ids += st.write_many([Summary(run_summary(k, n_ops), ()) for k in range(start, min(start + batch, n_runs))])
    first, step = ids[0], ids[int(0.9 * n_runs)]
    t = ops_table.alias("t")
    jitter = 1.0 + 1e-4 * ((runs_table.c.id * 7919 + t.c.var_id * 104729) % 1000)  # 1..1.1, the same on both dialects
    err = 1e-6 * jitter * sa.case((sa.and_(t.c.var_id == STEP_OP, runs_table.c.id >= step), 10.0), else_=1.0)
    cols = [c.name for c in ops_table.c if c.name != "id"]
    made = {"run_id": runs_table.c.id, "max_err": err}
    for start in range(1, len(ids), batch):
        sel = (sa.select(*[made.get(c, t.c[c]) for c in cols]).select_from(runs_table.join(t, sa.true()))
               .where(t.c.run_id == first, runs_table.c.id.in_(ids[start:start + batch])))
        with st.engine.begin() as conn:
            conn.execute(ops_table.insert().from_select(cols, sel))
    # what a store that grew over months has had: its statistics (PostgreSQL's autovacuum would run
    # this on its own after the bulk load, competing with the timed queries)
    with st.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE" if st.engine.dialect.name == "postgresql" else "ANALYZE")


def timed(fn, repeat: int = 3) -> tuple:
    """(wall, CPU of this process) seconds, medians of ``repeat`` warm runs. On a shared machine
    the wall time waits for the CPU; for PostgreSQL, the server's CPU is not in the second."""
    fn()
    times = [_once(fn) for _ in range(repeat)]
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def _once(fn) -> tuple:
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--ops", type=int, default=500)
    ap.add_argument("--batch", type=int, default=1000, help="runs per transaction of the fill")
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
    write(args.out, text + "\n", append=True, show=False)
    return 0


def bench(url: str, args: argparse.Namespace) -> str:
    """Fill the store at ``url`` (unless it holds runs), time the queries: the Markdown table."""
    t0 = time.perf_counter()
    with open_store(url) as st:
        filled = not st.runs(limit=1)
        if filled:
            fill(st, args.runs, args.ops, args.batch)
        seconds = time.perf_counter() - t0
        runs = st.runs()
        series, a, b = runs[-1]["series"], runs[100]["uid"], runs[-1]["uid"]
        results = {
            "runs of the model over time": timed(lambda: st.runs(model="model.mge")),
            "op7's error over builds": timed(lambda: st.op_history(series, f"n/op{STEP_OP}")),
            "first run where op7 left its band": timed(lambda: _first_out(st.op_history(series, f"n/op{STEP_OP}"),
                                                                            0.0)),
            "what changed between two runs": timed(lambda: _diff(st, [a, b])),
        }
    results["check of the newest run (open, read, judge)"] = timed(lambda: check(url))
    dialect = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
    how = f"filled in {seconds:.0f} s ({args.batch} runs per transaction)" if filled else "filled before"
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [f"## {len(runs)} runs x {args.ops} operators on {dialect}", "",
             f"`bench/store_scale.py`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average {load} "
             f"at the end; {how}. Medians of 3 warm runs.", ""]
    table = Table("query", "wall s", "CPU s (this process)", "target: wall < 1 s")
    for k, (wall, cpu) in results.items():
        table.row(k, f"{wall:.3f}", f"{cpu:.3f}", "PASS" if wall < 1 else "FAIL")
    return "\n".join(lines + table.lines()) + "\n"


if __name__ == "__main__":
    sys.exit(main())
