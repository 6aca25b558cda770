"""The service's schema, written once for every backend: tables, columns, indexes and the steps
that migrate a database from one version to the next, in neutral terms that `migrations(dialect)`
renders as SQLite's or PostgreSQL's SQL.

A column's type is one of `TYPES`' neutral names (what the column holds), never a dialect's. What
only one dialect has says so (`only=`): an index SQLite's planner needs and PostgreSQL's does not,
a table only PostgreSQL's replicas share.

**Versions.** Each dialect numbers only the steps that run on it: its version is how many of its
own steps a database has applied (kept by the backend: SQLite's `PRAGMA user_version`,
PostgreSQL's `memfs_schema`). So a step of one dialect alone moves only that dialect's number, and
a database written before this list (SQLite's four steps, PostgreSQL's three) is at the version
its backend left it at. A step is only ever appended: a database's number names the steps it has.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfs.service.backend import DatabaseError

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
DIALECTS = (SQLITE, POSTGRESQL)

# neutral type -> (SQLite, PostgreSQL)
TYPES: dict[str, tuple[str, str]] = {
    # a row's sequence number, its primary key: grows by one per row, never reused
    "serial": ("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"),
    "text": ("TEXT", "TEXT"),
    # text compared or sorted in byte order of its UTF-8 (paths, times, ids), whatever the
    # database's locale: SQLite's BINARY collation is that already; PostgreSQL's must be "C"
    "bytewise": ("TEXT", 'TEXT COLLATE "C"'),
    "int": ("INTEGER", "INTEGER"),
    "int64": ("INTEGER", "BIGINT"),  # counters: SQLite's INTEGER is 64 bits
    # memory content: PostgreSQL's text cannot hold NUL, which memory content may (bytea, UTF-8)
    "content": ("TEXT", "BYTEA"),
    # store_kv's value: an integer; SQLite's column was written without a type in schema 1
    "kv_value": ("", "BIGINT NOT NULL"),
    "float": ("REAL", "DOUBLE PRECISION"),
    "bool": ("INTEGER", "BOOLEAN"),
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # a key of TYPES
    constraints: str = ""  # NOT NULL, UNIQUE, PRIMARY KEY: the same words in both dialects


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()  # a key of several columns (one column's: its constraints)
    without_rowid: bool = False  # SQLite: the rows live in the primary key's b-tree (no rowid)
    unlogged: bool = False  # PostgreSQL: not written to the WAL (lost, emptied, by a crash)
    only: str | None = None  # the one dialect that has the table


@dataclass(frozen=True)
class Bytewise:
    """An index column ordered in byte order where the column itself is not (PostgreSQL)."""

    column: str


@dataclass(frozen=True)
class Index:
    name: str
    table: str
    columns: tuple[str | Bytewise, ...]
    unique: bool = False
    where: str | None = None  # a partial index's condition, the same SQL in both dialects
    only: str | None = None


Step = tuple[Table | Index, ...]


def _cols(*spec: tuple[str, str] | tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in spec)


# The steps, oldest first; each says why it came. Never edit one a database may have run: append.
STEPS: tuple[Step, ...] = (
    # 1: the tables. Deleted memories stay in `memories` as tombstones (content dropped), so the
    # changes feed reports a deletion with its last path after its versions are gone.
    (
        Table(
            "stores",
            _cols(
                ("seq", "serial"),
                ("id", "text", "NOT NULL UNIQUE"),
                ("name", "text", "NOT NULL"),
                ("description", "text", "NOT NULL"),
                ("metadata", "text", "NOT NULL"),
                ("created_at", "bytewise", "NOT NULL"),
                ("updated_at", "text", "NOT NULL"),
                ("archived_at", "text"),
            ),
        ),
        # per store: its counter, its history floor, a relay's bookkeeping (sql_tx.py, mirror.py)
        Table(
            "store_kv",
            _cols(("store_id", "text", "NOT NULL"), ("key", "text", "NOT NULL"), ("value", "kv_value")),
            primary_key=("store_id", "key"),
            without_rowid=True,
        ),
        Table(
            "memories",
            _cols(
                ("id", "bytewise", "PRIMARY KEY"),
                ("store_id", "text", "NOT NULL"),
                ("path", "bytewise", "NOT NULL"),
                ("content", "content"),
                ("sha", "text"),
                ("size", "int"),
                ("version_id", "text", "NOT NULL"),
                ("counter", "int64", "NOT NULL"),
                ("created_at", "text", "NOT NULL"),
                ("updated_at", "text", "NOT NULL"),
                ("deleted_at", "text"),
            ),
        ),
        # The backstop against two live memories at one path, whatever the code above it does.
        Index(
            "memories_live_path", "memories", ("store_id", "path"), unique=True, where="deleted_at IS NULL"
        ),
        Index("memories_counter", "memories", ("store_id", "counter")),
        Table(
            "versions",
            _cols(
                ("seq", "serial"),
                ("id", "text", "NOT NULL UNIQUE"),
                ("store_id", "text", "NOT NULL"),
                ("memory_id", "text", "NOT NULL"),
                ("operation", "text", "NOT NULL"),
                ("path", "bytewise"),
                ("content", "content"),
                ("sha", "text"),
                ("size", "int"),
                ("counter", "int64", "NOT NULL"),
                ("created_at", "bytewise", "NOT NULL"),
                ("actor_type", "text"),
                ("actor_id", "text"),
                ("redacted_at", "text"),
                ("redactor_type", "text"),
                ("redactor_id", "text"),
            ),
        ),
        Index("versions_store", "versions", ("store_id", "seq")),
        Index("versions_memory", "versions", ("store_id", "memory_id", "counter")),
        Table(
            "sessions",
            _cols(
                ("seq", "serial"),
                ("id", "text", "NOT NULL UNIQUE"),
                ("token_hash", "text", "UNIQUE"),
                ("title", "text"),
                ("metadata", "text", "NOT NULL"),
                ("created_at", "text", "NOT NULL"),
                ("updated_at", "text", "NOT NULL"),
                ("archived_at", "text"),
            ),
        ),
        Table(
            "session_resources",
            _cols(
                ("session_id", "text", "NOT NULL"),
                ("position", "int", "NOT NULL"),
                ("memory_store_id", "text", "NOT NULL"),
                ("access", "text", "NOT NULL"),
                ("name", "text", "NOT NULL"),
                ("description", "text", "NOT NULL"),
                ("instructions", "text"),
                ("mount_path", "text", "NOT NULL"),
            ),
            primary_key=("session_id", "position"),
        ),
    ),
    # 2: a store's overview (count and bytes) and the sessions attaching it, each from an index.
    (
        # covering: a store's live count and bytes are summed without reading a memory row
        # (deleted_at is a column too: SQLite covers a query only with every column it names)
        Index(
            "memories_live_size", "memories", ("store_id", "size", "deleted_at"), where="deleted_at IS NULL"
        ),
        Index("session_resources_store", "session_resources", ("memory_store_id", "session_id")),
    ),
    # 3: a basic-view listing page from an index, on SQLite. `content` precedes the other columns
    # in a memory's row, so reading its sha or size walks the content's overflow pages first (a
    # page of 100 basic items read ~4 overflow pages per memory); covering, no row is read.
    # PostgreSQL keeps large content out of the row (TOAST) and needs none.
    (
        Index(
            "memories_live_listing",
            "memories",
            ("store_id", "path", "id", "sha", "size", "version_id", "created_at", "updated_at", "deleted_at"),
            where="deleted_at IS NULL",
            only=SQLITE,
        ),
    ),
    # 4: a versions listing in the hosted order (created_at desc, id desc), from an index; and on
    # PostgreSQL the per-organisation token buckets every replica shares (orglimit.py). Unlogged:
    # a bucket is a few seconds of state, a crash that loses it only refills it, and no write of
    # it waits for the WAL. (One process's buckets are in its memory: SQLite has no replicas.)
    (
        Index("versions_time", "versions", ("store_id", "created_at", Bytewise("id"))),
        Table(
            "org_buckets",
            _cols(
                ("class", "text", "PRIMARY KEY"),
                ("tokens", "float", "NOT NULL"),
                ("at", "float", "NOT NULL"),
                ("took", "bool", "NOT NULL"),
            ),
            unlogged=True,
            only=POSTGRESQL,
        ),
    ),
)


def _column(c: Column, dialect: str) -> str:
    return " ".join(w for w in (c.name, TYPES[c.type][DIALECTS.index(dialect)], c.constraints) if w)


def _index_column(c: str | Bytewise, dialect: str) -> str:
    if isinstance(c, str):
        return c
    return f'({c.column} COLLATE "C")' if dialect == POSTGRESQL else c.column


def render(item: Table | Index, dialect: str) -> str:
    """One CREATE statement in `dialect`'s SQL."""
    if isinstance(item, Index):
        unique = "UNIQUE " if item.unique else ""
        cols = ", ".join(_index_column(c, dialect) for c in item.columns)
        where = f" WHERE {item.where}" if item.where else ""
        return f"CREATE {unique}INDEX {item.name} ON {item.table} ({cols}){where}"
    parts = [_column(c, dialect) for c in item.columns]
    if item.primary_key:
        parts.append(f"PRIMARY KEY ({', '.join(item.primary_key)})")
    unlogged = "UNLOGGED " if item.unlogged and dialect == POSTGRESQL else ""
    without_rowid = " WITHOUT ROWID" if item.without_rowid and dialect == SQLITE else ""
    return f"CREATE {unlogged}TABLE {item.name} ({', '.join(parts)}){without_rowid}"


def migrations(dialect: str) -> list[list[str]]:
    """The dialect's steps, each its list of statements: version v is the first v of them."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    steps = ([render(i, dialect) for i in step if i.only in (None, dialect)] for step in STEPS)
    return [s for s in steps if s]


def latest(dialect: str) -> int:
    """The version this memfs brings a database of `dialect` to."""
    return len(migrations(dialect))


def pending(dialect: str, version: int, target: int) -> list[str]:
    """The statements that bring a database of `dialect` at `version` to `target` (the backend's
    SCHEMA_VERSION, `latest`), in order; DatabaseError when the database is past `target`: a newer
    memfs migrated it, and this one does not know its schema."""
    if version > target:
        raise DatabaseError(f"schema version {version} is newer than this memfs supports ({target})")
    return [stmt for step in migrations(dialect)[version:target] for stmt in step]
