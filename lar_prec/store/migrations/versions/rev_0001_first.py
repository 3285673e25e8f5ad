"""The first schema: runs and their operator rows.

Revision ID: 0001
Revises:
"""
from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("uid", sa.String(64), nullable=False, unique=True),
        sa.Column("created", sa.String(40), nullable=False),
        sa.Column("command", sa.String(40), nullable=False),
        sa.Column("config", sa.String(40), nullable=False),
        sa.Column("options", sa.Text, nullable=False),
        sa.Column("seed", sa.Integer),
        sa.Column("lar_prec_version", sa.String(40), nullable=False),
        sa.Column("lar_path", sa.Text),
        sa.Column("lar_sha256", sa.String(64)),
        sa.Column("lar_version", sa.Text),
        sa.Column("megengine_version", sa.String(40)),
        sa.Column("host", sa.Text),
        sa.Column("device", sa.Text, nullable=False),
        sa.Column("cpu_model", sa.Text),
        sa.Column("cpu_features", sa.Text, nullable=False),
        sa.Column("model_name", sa.Text),
        sa.Column("model_sha256", sa.String(64)),
        sa.Column("input_sha256", sa.String(64)),
        sa.Column("verdict", sa.Text, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=False),
        sa.Column("n_vars", sa.Integer, nullable=False),
        sa.Column("n_not_ok", sa.Integer, nullable=False),
        sa.Column("n_roots", sa.Integer, nullable=False),
        sa.Column("output_err", sa.Float),
        sa.Column("analysis_dir", sa.Text),
        sa.Column("argv", sa.Text, nullable=False),
        sa.Column("settings", sa.Text, nullable=False),
    )
    op.create_index("ix_runs_model_created", "runs", ["model_sha256", "created"])
    op.create_table(
        "ops",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("part", sa.String(80), nullable=False),
        sa.Column("op_key", sa.String(400), nullable=False),
        sa.Column("var_id", sa.Integer, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("opr_type", sa.String(80), nullable=False),
        sa.Column("dtype", sa.String(40)),
        sa.Column("shape", sa.String(200), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("max_err", sa.Float),
        sa.Column("max_abs_err", sa.Float),
        sa.Column("cosine", sa.Float),
        sa.Column("max_ulp", sa.Float),
        sa.Column("n_nonfinite", sa.Integer),
        sa.Column("local_err", sa.Float),
        sa.Column("floor", sa.Float),
        sa.Column("algorithm", sa.Text),
        sa.Column("jitter_band", sa.Float),
        sa.Column("is_root", sa.Boolean, nullable=False),
        sa.Column("root_rank", sa.Integer),
        sa.Column("cause", sa.Text),
        sa.Column("inputs", sa.Text, nullable=False),
    )
    op.create_index("ix_ops_run", "ops", ["run_id"])
    op.create_index("ix_ops_key_run", "ops", ["op_key", "run_id"])


def downgrade() -> None:
    op.drop_table("ops")
    op.drop_table("runs")
