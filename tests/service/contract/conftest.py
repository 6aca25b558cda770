"""The storage contract suite runs in-process against every backend (docs/SEMANTICS.md#d-storage).

`storage` is the service's rules over a fresh database of each backend; `backend` is the same
backend underneath, for the tests that hold a transaction open themselves.
"""

from __future__ import annotations

import pytest

from memfs.service.database import open_storage


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/contract.db"
        return
    cluster = request.getfixturevalue("pg_cluster")
    url = cluster.create_database("contract")
    try:
        yield url
    finally:
        cluster.drop_database(url)


@pytest.fixture
def storage(db_url):
    s = open_storage(db_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def backend(storage):
    return storage.backend


@pytest.fixture
def backend_kind(db_url) -> str:
    return "postgresql" if db_url.startswith("postgresql") else "sqlite"
