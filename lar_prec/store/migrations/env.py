"""Alembic's entry: runs the store's migrations on the connection :mod:`lar_prec.store.db`
hands over (``config.attributes["connection"]``), inside that connection's transaction."""
from __future__ import annotations

from alembic import context

from lar_prec.store.schema import metadata


def run(config) -> None:  # type: ignore[no-untyped-def]
    context.configure(connection=config.attributes["connection"], target_metadata=metadata,
                      render_as_batch=True)  # SQLite alters tables by copying them
    with context.begin_transaction():
        context.run_migrations()


try:
    _config = context.config
except (NameError, AttributeError):  # imported outside a migration (the import checks of the tests): nothing to run
    _config = None
if _config is not None:
    run(_config)
