"""The store's tables at the newest revision (SQLAlchemy Core), what :mod:`.db` reads and
writes. Each change is also a migration in ``migrations/versions/`` (a store made by an older
lar-prec is brought to this shape when opened).

``runs``: one analysis (:class:`lar_prec.store.summary.RunSummary`); ``series`` groups the
runs a history is made of. ``ops``: one operator output of one run
(:class:`lar_prec.store.summary.OpSummary`), keyed by the stable operator key. ``speeds``: the
timed runs of one run, one row per part (:class:`lar_prec.store.summary.SpeedSummary`).
"""
from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("uid", String(64), nullable=False, unique=True),
    Column("created", String(40), nullable=False),
    Column("command", String(40), nullable=False),
    Column("config", String(40), nullable=False),
    Column("options", Text, nullable=False),
    Column("seed", Integer),
    Column("lar_prec_version", String(40), nullable=False),
    Column("lar_path", Text),
    Column("lar_sha256", String(64)),
    Column("lar_version", Text),
    Column("megengine_version", String(40)),
    Column("host", Text),
    Column("device", Text, nullable=False),
    Column("cpu_model", Text),
    Column("cpu_features", Text, nullable=False),
    Column("model_name", Text),
    Column("model_sha256", String(64)),
    Column("input_sha256", String(64)),
    Column("verdict", Text, nullable=False),
    Column("exit_code", Integer, nullable=False),
    Column("n_vars", Integer, nullable=False),
    Column("n_not_ok", Integer, nullable=False),
    Column("n_roots", Integer, nullable=False),
    Column("output_err", Float),
    Column("analysis_dir", Text),
    Column("argv", Text, nullable=False),
    Column("settings", Text, nullable=False),
    # revision 0002
    Column("device_kind", Text, nullable=False),
    Column("series", String(24), nullable=False),
)
Index("ix_runs_series_created", runs.c.series, runs.c.created)
Index("ix_runs_model_created", runs.c.model_sha256, runs.c.created)

ops = Table(
    "ops", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("part", String(80), nullable=False),
    Column("op_key", String(400), nullable=False),
    Column("var_id", Integer, nullable=False),
    Column("name", Text, nullable=False),
    Column("opr_type", String(80), nullable=False),
    Column("dtype", String(40)),
    Column("shape", String(200), nullable=False),
    Column("status", String(20), nullable=False),
    Column("max_err", Float),
    Column("max_abs_err", Float),
    Column("cosine", Float),
    Column("max_ulp", Float),
    Column("n_nonfinite", Integer),
    Column("local_err", Float),
    Column("floor", Float),
    Column("algorithm", Text),
    Column("jitter_band", Float),
    Column("is_root", Boolean, nullable=False),
    Column("root_rank", Integer),
    Column("cause", Text),
    Column("inputs", Text, nullable=False),  # JSON list of the keys of its inputs
)
Index("ix_ops_run", ops.c.run_id)
Index("ix_ops_key_run", ops.c.op_key, ops.c.run_id)

# revision 0003: one row per timed part of a run (the plain default run: part "", each option
# by its name): :class:`lar_prec.store.summary.SpeedSummary`
speeds = Table(
    "speeds", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("part", String(80), nullable=False),
    Column("status", String(20), nullable=False),
    Column("reason", Text),
    Column("median_ms", Float),
    Column("round_ms", Text, nullable=False),  # JSON list: each round's median time per iteration
    Column("spread_lo", Float),
    Column("spread_hi", Float),
    Column("rounds", Integer, nullable=False),
    Column("iters", Integer, nullable=False),
    Column("warmup_iter", Integer, nullable=False),
    Column("threads", Integer, nullable=False),
    Column("device", Text, nullable=False),
    Column("cpu_model", Text),
    Column("lar", Text, nullable=False),
    Column("machine", String(64), nullable=False),
    Column("speedup", Float),
    Column("speedup_lo", Float),
    Column("speedup_hi", Float),
    Column("measurable", Boolean, nullable=False),
)
Index("ix_speeds_run", speeds.c.run_id)
