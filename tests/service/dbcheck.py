"""Read a test service's database directly, whichever backend it runs on (`?` placeholders)."""

from __future__ import annotations

import sqlite3


def rows(service, sql: str, args: tuple = ()) -> list[tuple]:
    if service.db_url:
        import psycopg

        with psycopg.connect(service.db_url) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), args).fetchall()]
    with sqlite3.connect(service.db_path) as db:
        return [tuple(r) for r in db.execute(sql, args).fetchall()]
