"""One Alembic revision per file, oldest first: ``0001`` the first schema, ``0002`` ...."""
