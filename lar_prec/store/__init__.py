"""The results store: summaries of analyses in a database (an SQLite file by default,
PostgreSQL for a team), with a versioned schema that migrates forward (Alembic). SQLAlchemy
and Alembic are imported only in this folder; nothing else reads the store raw."""
