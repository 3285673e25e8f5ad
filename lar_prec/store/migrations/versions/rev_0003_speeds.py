"""Speed: the timed runs of a stored run (``lar-prec zoo``'s timing of each task, ``sweep
--speed-runs``), one row per part (the plain default run, each option), what ``check`` judges a
run's speed by.

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "speeds",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("part", sa.String(80), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("median_ms", sa.Float),
        sa.Column("round_ms", sa.Text, nullable=False),
        sa.Column("spread_lo", sa.Float),
        sa.Column("spread_hi", sa.Float),
        sa.Column("rounds", sa.Integer, nullable=False),
        sa.Column("iters", sa.Integer, nullable=False),
        sa.Column("warmup_iter", sa.Integer, nullable=False),
        sa.Column("threads", sa.Integer, nullable=False),
        sa.Column("device", sa.Text, nullable=False),
        sa.Column("cpu_model", sa.Text),
        sa.Column("lar", sa.Text, nullable=False),
        sa.Column("machine", sa.String(64), nullable=False),
        sa.Column("speedup", sa.Float),
        sa.Column("speedup_lo", sa.Float),
        sa.Column("speedup_hi", sa.Float),
        sa.Column("measurable", sa.Boolean, nullable=False),
    )
    op.create_index("ix_speeds_run", "speeds", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_speeds_run", "speeds")
    op.drop_table("speeds")
