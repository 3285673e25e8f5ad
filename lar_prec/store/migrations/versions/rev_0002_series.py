"""Runs grouped into series: ``device_kind`` (CPU model and architecture, or the phone) and
``series`` (model, input, command, configuration, options, device kind hashed), computed for
the runs a store already holds, and the index history queries read by.

Revision ID: 0002
Revises: 0001
"""
import hashlib
import json

from alembic import op
import sqlalchemy as sa

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _series(row) -> str:  # type: ignore[no-untyped-def]
    # lar_prec.store.summary.series_key as of this revision (a migration never changes)
    text = "\x1f".join([row.model_sha256 or "", row.input_sha256 or "", row.command, row.config,
                        " ".join(json.loads(row.options)), _kind(row)])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _kind(row) -> str:  # type: ignore[no-untyped-def]
    # the device string of 0001 is "<host> <cpu> <arch>": the kind is without the host
    parts = (row.device or "").split(" ", 1)
    return parts[1] if len(parts) == 2 else row.device or ""


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("device_kind", sa.Text, nullable=False, server_default=""))
        batch.add_column(sa.Column("series", sa.String(24), nullable=False, server_default=""))
    conn = op.get_bind()
    runs = sa.table("runs", sa.column("id"), sa.column("model_sha256"), sa.column("input_sha256"),
                    sa.column("command"), sa.column("config"), sa.column("options"), sa.column("device"),
                    sa.column("device_kind"), sa.column("series"))
    for row in conn.execute(sa.select(runs)).fetchall():
        conn.execute(runs.update().where(runs.c.id == row.id).values(device_kind=_kind(row), series=_series(row)))
    op.create_index("ix_runs_series_created", "runs", ["series", "created"])


def downgrade() -> None:
    op.drop_index("ix_runs_series_created", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("series")
        batch.drop_column("device_kind")
