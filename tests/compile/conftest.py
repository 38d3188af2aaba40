"""Fixtures for compiler tests."""

from __future__ import annotations

from typing import Any

import pytest

from tests.compile.support import fixture_plugins


@pytest.fixture(scope="session")
def plugins() -> dict[str, dict[str, Any]]:
    return fixture_plugins()
