"""Fixtures of the service suite: the official client pointed at a `memfs serve` subprocess."""

from __future__ import annotations

import anthropic
import pytest


@pytest.fixture
def client(service):
    """The official `anthropic` client, unchanged, with the admin key. No retries: errors surface at once."""
    c = anthropic.Anthropic(api_key=service.admin_key, base_url=service.base_url, max_retries=0)
    yield c
    c.close()


@pytest.fixture
def store(client):
    return client.beta.memory_stores.create(name="Test Store", description="for tests")
