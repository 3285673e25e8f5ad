"""The store's schema migrations (Alembic): ``env.py`` and one file per revision in ``versions/``."""
