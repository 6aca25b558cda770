"""Fixtures of the service suite: the official client pointed at a `memfs serve` subprocess.

Every test here runs against both backends: `service` is `memfs serve --db sqlite:///…` and
`memfs serve --db postgresql://…` (a fresh database on one throwaway cluster per test session).
"""

from __future__ import annotations

import anthropic
import pytest

from tests.support.postgres import PostgresCluster
from tests.support.service import ServiceProcess


@pytest.fixture(scope="session")
def pg_cluster():
    """One throwaway PostgreSQL cluster for the whole run; each test gets its own database."""
    cluster = PostgresCluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_kind(request) -> str:
    return request.param


@pytest.fixture
def service_db(request, db_kind, tmp_path):
    """The --db of a test's service: None (the default SQLite file) or a fresh PostgreSQL database."""
    if db_kind == "sqlite":
        yield None
        return
    cluster = request.getfixturevalue("pg_cluster")
    url = cluster.create_database("svc")
    try:
        yield url
    finally:
        cluster.drop_database(url)


@pytest.fixture
def service(tmp_path, service_db):
    svc = ServiceProcess(tmp_path / "service", db_url=service_db)
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture
def client(service):
    """The official `anthropic` client, unchanged, with the admin key. No retries: errors surface at once."""
    c = anthropic.Anthropic(api_key=service.admin_key, base_url=service.base_url, max_retries=0)
    yield c
    c.close()


@pytest.fixture
def store(client):
    return client.beta.memory_stores.create(name="Test Store", description="for tests")
