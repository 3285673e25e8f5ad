"""Opening a store, migrating it forward, writing one analysis in one transaction, and reading
rows back as records. The only module besides the schema and migrations that talks SQL.

A store is named by ``--store URL`` or ``LAR_PREC_STORE``: a file path (``results.db``) or
``sqlite:///path`` for the embedded SQLite file, ``postgresql://user@host:port/db`` for a
server a team shares. Opening one that is new creates the schema; one written by an older
lar-prec is migrated (Alembic, ``migrations/``); one written by a newer lar-prec is refused.
Every failure is a :class:`~lar_prec.errors.StoreError` (exit 2) naming the store.

Several lar-prec may open and write one store at once (a nightly job's analyses in parallel):
creating or migrating the schema is serialized (SQLite: a ``BEGIN IMMEDIATE`` transaction,
PostgreSQL: an advisory lock held by the migrating transaction), and a run is inserted with
``ON CONFLICT (uid) DO NOTHING``, its uid being its content (summary.content_uid): the same
analysis is one run whoever writes it. Every wait is bounded by ``LAR_PREC_STORE_TIMEOUT``
seconds (10): PostgreSQL's connection, each statement and each lock; SQLite's wait for a
file another process holds.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic import command as alembic_command
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect, sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from lar_prec.errors import StoreError
from lar_prec.store.schema import ops as ops_table, runs as runs_table, speeds as speeds_table
from lar_prec.store.summary import OpSummary, RunSummary, SpeedSummary, Summary

log = logging.getLogger(__name__)

#: the environment variable that names a store when ``--store`` is not given
STORE_ENV = "LAR_PREC_STORE"
#: seconds any wait on the store may last (connect, statement, lock); default DEFAULT_TIMEOUT
TIMEOUT_ENV = "LAR_PREC_STORE_TIMEOUT"
DEFAULT_TIMEOUT = 10.0
#: the advisory lock (PostgreSQL) that serializes creating and migrating a store's schema
_SCHEMA_LOCK = 0x6C61725F70726563  # "lar_prec"
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_RUN_FIELDS = [f.name for f in fields(RunSummary)]
_OP_FIELDS = [f.name for f in fields(OpSummary)]
_SPEED_FIELDS = [f.name for f in fields(SpeedSummary)]


def store_url(value: Optional[str]) -> Optional[str]:
    """``--store``'s value, else ``$LAR_PREC_STORE``, else None (no store)."""
    return value or os.environ.get(STORE_ENV) or None


def shown_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def store_timeout() -> float:
    """``$LAR_PREC_STORE_TIMEOUT`` in seconds (default 10): bounds every wait on the store."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.1 <= value <= 86400:  # NaN too
        raise StoreError(f"{TIMEOUT_ENV}={raw!r}: expected seconds, a number from 0.1 to 86400")
    return value


def _connect_args(url: sa.engine.URL, timeout: float) -> Dict[str, Any]:
    """What bounds a connection's waits, per driver."""
    if url.get_backend_name() == "sqlite":
        # how long a write waits for the file another process holds (pysqlite's busy timeout);
        # a ?timeout= in the URL wins
        return {} if "timeout" in url.query else {"timeout": timeout}
    if url.get_driver_name() == "psycopg2":
        ms = int(timeout * 1000)
        # connect_timeout bounds the whole start-up (a port that accepts and never answers);
        # statement and lock timeouts are the server's; keepalives find a peer that vanished
        return {"connect_timeout": max(1, math.ceil(timeout)),
                "options": f"-c statement_timeout={ms} -c lock_timeout={ms}",
                "keepalives": 1, "keepalives_idle": max(1, math.ceil(timeout)), "keepalives_interval": 2,
                "keepalives_count": 3}
    return {}


_shown = shown_url


def _engine_url(url: str) -> str:
    if "://" not in url:  # a plain path: the SQLite file
        return "sqlite:///" + str(Path(url).expanduser().resolve())
    if url.startswith(("postgres://", "postgres+")):  # Heroku's and libpq's spelling; SQLAlchemy knows only postgresql
        return "postgresql" + url[len("postgres"):]
    return url


def _migration_config(conn: Connection) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def head_revision() -> str:
    """The newest schema revision this lar-prec knows."""
    return ScriptDirectory(str(_MIGRATIONS)).get_current_head()  # type: ignore[return-value]


def unknown_revision(url: str, current: str, tables: Set[str], head: str) -> StoreError:
    """The error for a schema revision this lar-prec does not know: a newer lar-prec's (its
    revisions are numbers after ``head``, beside its ``runs`` and ``ops`` tables), or another
    program's that also uses Alembic (a hash revision, other tables): not a lar-prec store."""
    ours = re.fullmatch(r"\d{4}", current) is not None and head.isdigit() and int(current) > int(head)
    if ours and {"runs", "ops"} <= tables:
        return StoreError(f"store {_shown(url)}: written by a newer lar-prec (schema revision {current}; this "
                          f"lar-prec knows up to {head}): upgrade lar-prec to read it")
    other = sorted(tables - {"alembic_version"})
    return StoreError(f"store {_shown(url)}: not a lar-prec store: its Alembic revision {current!r} is none of "
                      f"lar-prec's (0001..{head})" + (f", its tables: {', '.join(other[:5])}" if other else "")
                      + "; give a lar-prec store or a new file")


class Store:
    """An open store. Use :func:`open_store`; ``close()`` (or ``with``) when done."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def _fail(self, what: str, exc: BaseException) -> StoreError:
        return store_error(self.url, what, exc)

    # ---------------------------------------------------------------- writing

    def write(self, summary: Summary) -> int:
        """Write one analysis (its run and every operator row) in one transaction; the run's id
        (the one the store held already when it holds this uid: nothing is written twice).
        A failure (locked, full, gone) rolls back: nothing of the run stays in the store."""
        return self.add(summary)[0]

    def add(self, summary: Summary) -> Tuple[int, bool]:
        """:meth:`write`, and whether this call added it (False: the store held the uid)."""
        try:
            return self._insert([summary])[0]
        except SQLAlchemyError as exc:
            raise self._fail(f"writing run {summary.run.uid[:12]} ({len(summary.ops)} operators) failed; nothing of it "
                             "was written", exc) from None

    def write_many(self, summaries: Sequence[Summary]) -> List[int]:
        """Write several analyses in one transaction (all or none), each table in one
        executemany: a history imported at once, or a benchmark's store; the runs' ids."""
        try:
            return [i for i, _ in self._insert(summaries)]
        except SQLAlchemyError as exc:
            raise self._fail(f"writing {len(summaries)} runs failed; none of them was written", exc) from None

    def _insert(self, summaries: Sequence[Summary]) -> List[Tuple[int, bool]]:
        """Insert-or-ignore by uid (one executemany), then the operators of the runs this
        transaction added: a uid another writer stored first (before or at the same time) is
        left as it is, never stored twice."""
        rows = [_run_row(s.run) for s in summaries]
        dialect = self.engine.dialect.name
        with self.engine.begin() as conn:
            if dialect in ("sqlite", "postgresql"):
                ins = (sqlite_dialect if dialect == "sqlite" else pg_dialect).insert(runs_table)
                stmt = ins.on_conflict_do_nothing(index_elements=["uid"]).returning(runs_table.c.id, runs_table.c.uid)
                added = {uid: int(i) for i, uid in conn.execute(stmt, rows)}
            else:  # another database: plain inserts (a uid held already fails the transaction)
                added = {r["uid"]: int(conn.execute(runs_table.insert().values(**r)).inserted_primary_key[0])
                         for r in rows}
            ops = [_op_row(o, added[s.run.uid]) for s in summaries if s.run.uid in added for o in s.ops]
            if ops:
                conn.execute(ops_table.insert(), ops)
            speeds = [_speed_row(p, added[s.run.uid]) for s in summaries if s.run.uid in added for p in s.speeds]
            if speeds:
                conn.execute(speeds_table.insert(), speeds)
            held = {}
            missing = sorted({r["uid"] for r in rows} - set(added))
            for k in range(0, len(missing), 500):  # bound the parameters of one statement
                held.update((u, n) for u, n in conn.execute(sa.select(runs_table.c.uid, runs_table.c.id)
                                                            .where(runs_table.c.uid.in_(missing[k:k + 500]))))
        return [(added[s.run.uid], True) if s.run.uid in added else (int(held[s.run.uid]), False) for s in summaries]

    # ---------------------------------------------------------------- reading

    def _rows(self, query: Any) -> List[Any]:
        try:
            with self.engine.connect() as conn:
                return list(conn.execute(query).fetchall())
        except SQLAlchemyError as exc:
            raise self._fail("reading failed", exc) from None

    def runs(self, *, series: Optional[str] = None, model: Optional[str] = None, uid: Optional[str] = None,
             analysis_dir: Optional[str] = None, ids: Optional[Iterable[int]] = None, limit: Optional[int] = None,
             newest_first: bool = False) -> List[Dict[str, Any]]:
        """Runs (dicts with ``id`` and the :class:`RunSummary` fields) in time order."""
        q = sa.select(runs_table)
        if ids is not None:
            q = q.where(runs_table.c.id.in_(list(ids)))
        if series is not None:
            q = q.where(runs_table.c.series == series)
        if model is not None:  # a sha256 or a file name
            q = q.where(sa.or_(runs_table.c.model_sha256 == model, runs_table.c.model_name == model))
        if uid is not None:
            q = q.where(runs_table.c.uid.startswith(uid))
        if analysis_dir is not None:
            q = q.where(runs_table.c.analysis_dir == analysis_dir)
        order = (runs_table.c.created.desc(), runs_table.c.id.desc()) if newest_first else \
            (runs_table.c.created, runs_table.c.id)
        q = q.order_by(*order)
        if limit is not None:
            q = q.limit(limit)
        return [_run_dict(r) for r in self._rows(q)]

    def ops(self, run_id: int, part: Optional[str] = None) -> List[OpSummary]:
        """The operator rows of one run, in var order."""
        q = sa.select(ops_table).where(ops_table.c.run_id == run_id).order_by(ops_table.c.id)
        if part is not None:
            q = q.where(ops_table.c.part == part)
        return [_op(r) for r in self._rows(q)]

    def op_history(self, series: str, op_key: str, part: str = "") -> List[Dict[str, Any]]:
        """One operator's rows along a series, oldest first: each with its run's id, uid,
        created, build fields and verdict."""
        q = (sa.select(ops_table, runs_table.c.uid, runs_table.c.created, runs_table.c.lar_path,
                       runs_table.c.lar_sha256, runs_table.c.lar_version, runs_table.c.megengine_version)
             .join(runs_table, runs_table.c.id == ops_table.c.run_id)
             .where(runs_table.c.series == series, ops_table.c.op_key == op_key, ops_table.c.part == part)
             .order_by(runs_table.c.created, runs_table.c.id))
        return [dict(r._mapping) for r in self._rows(q)]

    def ops_of_runs(self, run_ids: Sequence[int], part: str = "") -> List[Dict[str, Any]]:
        """The operator rows of several runs (dicts), in run and var order."""
        q = (sa.select(ops_table).where(ops_table.c.run_id.in_(list(run_ids)), ops_table.c.part == part)
             .order_by(ops_table.c.run_id, ops_table.c.id))
        return [dict(r._mapping) for r in self._rows(q)] if run_ids else []

    def series_ops(self, series: str, part: str = "", before: Optional[int] = None, window: int = 100) -> Iterator[Any]:
        """The operator rows of a series' newest ``window`` runs (``before``: runs with a smaller
        id), oldest first: what a check judges a new run against. Each row: run_id, op_key,
        status, max_err, local_err, floor, algorithm and its run's time (``created``)."""
        last = sa.select(runs_table.c.id).where(runs_table.c.series == series)
        if before is not None:
            last = last.where(runs_table.c.id < before)
        last = last.order_by(runs_table.c.created.desc(), runs_table.c.id.desc()).limit(window)
        q = (sa.select(ops_table.c.run_id, ops_table.c.op_key, ops_table.c.status, ops_table.c.max_err,
                       ops_table.c.local_err, ops_table.c.floor, ops_table.c.algorithm, runs_table.c.created)
             .join(runs_table, runs_table.c.id == ops_table.c.run_id)
             .where(ops_table.c.run_id.in_(last.scalar_subquery()), ops_table.c.part == part)
             .order_by(runs_table.c.created, runs_table.c.id))
        return iter(self._rows(q))

    def speeds(self, run_id: int) -> List[SpeedSummary]:
        """The timed parts of one run (none when it was not timed)."""
        q = sa.select(speeds_table).where(speeds_table.c.run_id == run_id).order_by(speeds_table.c.id)
        return [_speed(r) for r in self._rows(q)]

    def speed_history(self, run: Dict[str, Any], before: Optional[int] = None, window: int = 100
                      ) -> List[Tuple[Dict[str, Any], SpeedSummary]]:
        """The timed parts of the runs of the same model, input, command, configuration and
        options as ``run`` (a row of :meth:`runs`), on any machine, oldest first: (its run row,
        the part); ``before``: runs with a smaller id only; the newest ``window`` runs."""
        c = runs_table.c
        same = [c.model_sha256 == run["model_sha256"], c.input_sha256 == run["input_sha256"],
                c.command == run["command"], c.config == run["config"], c.options == json.dumps(list(run["options"]))]
        ids = sa.select(c.id).where(*same, c.id.in_(sa.select(speeds_table.c.run_id)))
        if before is not None:
            ids = ids.where(c.id < before)
        ids = ids.order_by(c.created.desc(), c.id.desc()).limit(window)
        found = {r["id"]: r for r in self.runs(ids=[i for (i,) in self._rows(ids)])}
        if not found:
            return []
        q = sa.select(speeds_table).where(speeds_table.c.run_id.in_(list(found))).order_by(speeds_table.c.id)
        rows = [(found[r.run_id], _speed(r)) for r in self._rows(q)]
        return sorted(rows, key=lambda x: (x[0]["created"], x[0]["id"]))

    def bands(self, model_sha256: Optional[str], input_sha256: Optional[str], device_kind: str) -> Dict[str, float]:
        """The jitter band per operator that shake measured for this model and input on this kind
        of device (the largest over its shake runs)."""
        # the shake runs first (a read of runs), then only their operators: one query joining
        # both may scan every operator row of the model's runs (seconds at 10,000 x 500)
        shakes = [r[0] for r in self._rows(
            sa.select(runs_table.c.id).where(runs_table.c.command == "shake", runs_table.c.model_sha256 == model_sha256,
                                             runs_table.c.input_sha256 == input_sha256,
                                             runs_table.c.device_kind == device_kind))]
        out: Dict[str, float] = {}
        for i in range(0, len(shakes), 500):  # bound the parameters of one statement
            q = (sa.select(ops_table.c.op_key, sa.func.max(ops_table.c.jitter_band))
                 .where(ops_table.c.run_id.in_(shakes[i:i + 500]), ops_table.c.jitter_band.is_not(None))
                 .group_by(ops_table.c.op_key))
            for k, v in self._rows(q):
                if v is not None:
                    out[k] = max(out.get(k, 0.0), float(v))
        return out


def _run_row(run: RunSummary) -> Dict[str, Any]:
    row = asdict(run)
    row.update(options=json.dumps(list(run.options)), cpu_features=" ".join(run.cpu_features),
               argv=json.dumps(list(run.argv)), settings=json.dumps(dict(run.settings), default=str),
               series=run.series)
    return row


def _op_row(o: OpSummary, run_id: int) -> Dict[str, Any]:
    row = {k: getattr(o, k) for k in _OP_FIELDS}  # not asdict: it deep-copies, 5x slower on a big import
    row.update(run_id=run_id, inputs=json.dumps(list(o.inputs)))
    return row


def _speed_row(p: SpeedSummary, run_id: int) -> Dict[str, Any]:
    row = {k: getattr(p, k) for k in _SPEED_FIELDS}
    row.update(run_id=run_id, round_ms=json.dumps(list(p.round_ms)), machine=p.machine)
    return row


def _speed(r: Any) -> SpeedSummary:
    m = dict(r._mapping)
    m["round_ms"] = tuple(json.loads(m.get("round_ms") or "[]"))
    return SpeedSummary(**{k: m[k] for k in _SPEED_FIELDS})


def _run_dict(r: Any) -> Dict[str, Any]:
    d = dict(r._mapping)
    d["options"] = tuple(json.loads(d.get("options") or "[]"))
    d["argv"] = tuple(json.loads(d.get("argv") or "[]"))
    d["settings"] = json.loads(d.get("settings") or "{}")
    d["cpu_features"] = tuple((d.get("cpu_features") or "").split())
    return d


def run_summary_of(d: Dict[str, Any]) -> RunSummary:
    """A :class:`RunSummary` from a row dict of :meth:`Store.runs`."""
    return RunSummary(**{k: d.get(k) for k in _RUN_FIELDS})


def _op(r: Any) -> OpSummary:
    m = dict(r._mapping)
    m["inputs"] = tuple(json.loads(m.get("inputs") or "[]"))
    return OpSummary(**{k: m[k] for k in _OP_FIELDS})


def store_error(url: str, what: str, exc: BaseException) -> StoreError:
    """One line: which store, what failed, and the database's own words (first line)."""
    orig = getattr(exc, "orig", None) or exc
    detail = " ".join(str(orig).split("\n")[0].split()) or type(orig).__name__
    hint = ""
    low = detail.lower()
    if "locked" in low:
        hint = " (another process holds the SQLite file: retry when it is done)"
    elif "disk is full" in low or "disk full" in low or "no space" in low or "file too large" in low:
        hint = " (the disk is full: free space, then add the analysis with `lar-prec store add`)"
    return StoreError(f"store {_shown(url)}: {what}: {detail}{hint}")


def open_store(url: str) -> Store:
    """Open (create or migrate) the store at ``url``.

    Raises:
        StoreError: the URL is malformed, the server or file cannot be reached or opened, the
            database is not a lar-prec store, or a newer lar-prec wrote it.
    """
    timeout = store_timeout()
    try:
        target = make_url(_engine_url(url))
        engine = sa.create_engine(target, future=True, connect_args=_connect_args(target, timeout),
                                  pool_timeout=timeout)
    except (ArgumentError, ImportError, ValueError) as exc:
        raise StoreError(f"store {_shown(url)}: not a store URL (expected a file path, sqlite:///PATH or "
                         f"postgresql://USER@HOST:PORT/DB): {exc}") from None
    if engine.dialect.name == "sqlite":
        path = engine.url.database
        if path and path != ":memory:" and not Path(path).parent.is_dir():
            raise StoreError(f"store {_shown(url)}: the folder {Path(path).parent} does not exist")
        if path and Path(path).is_dir():
            raise StoreError(f"store {_shown(url)}: {path} is a folder, not an SQLite file")

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
            # SQLAlchemy emits BEGIN itself (below): pysqlite's own would not cover the DDL of a
            # migration, and cannot take the write lock first
            dbapi_conn.isolation_level = None

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            # IMMEDIATE: the write lock at once (waiting for it up to the busy timeout), so a
            # transaction that reads then writes (the migration) never finds the file changed
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("lar_prec_lock") else "BEGIN")

    try:
        _migrate(engine, url)
    except StoreError:
        engine.dispose()
        raise
    except (SQLAlchemyError, DBAPIError) as exc:
        engine.dispose()
        raise store_error(url, "cannot open it", exc) from None
    return Store(engine, url)


def _migrate(engine: Engine, url: str) -> None:
    """Create the schema of a new store, or bring an older one forward, in one transaction that
    holds the schema's lock (other lar-prec opening it meanwhile wait, then find it made)."""
    head = head_revision()
    with engine.connect() as conn:  # the common case, a store at the head: no lock taken
        if MigrationContext.configure(conn).get_current_revision() == head:
            return
    with engine.connect().execution_options(lar_prec_lock=True) as conn, conn.begin():
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK})
        current = MigrationContext.configure(conn).get_current_revision()
        names = set(sa.inspect(conn).get_table_names())
        if current is None and names - {"alembic_version"}:
            raise StoreError(f"store {_shown(url)}: the database has tables ({', '.join(sorted(names)[:5])}) but is "
                             "not a lar-prec store")
        if current == head:
            return
        script = ScriptDirectory(str(_MIGRATIONS))
        known = {rev.revision for rev in script.walk_revisions()}
        if current is not None and current not in known:
            raise unknown_revision(url, current, names, head)
        log.info("store %s: schema %s -> %s", _shown(url), current, head)
        alembic_command.upgrade(_migration_config(conn), head)


def migrate_to(url: str, revision: str) -> None:
    """Bring a store to ``revision`` exactly (tests make a store of the first schema with it)."""
    engine = sa.create_engine(_engine_url(url), future=True)
    try:
        with engine.begin() as conn:
            alembic_command.upgrade(_migration_config(conn), revision)
    finally:
        engine.dispose()


def write_summary(url: str, summary: Summary) -> int:
    """Open the store, write one analysis, close; the run's id in the store."""
    with open_store(url) as store:
        return store.write(summary)


def read_runs_json(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Run rows as JSON objects (tuples as lists)."""
    return [{k: list(v) if isinstance(v, tuple) else v for k, v in r.items()} for r in rows]
