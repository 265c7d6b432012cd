"""Shared fixtures and options."""

from __future__ import annotations

import pytest
from hypothesis import settings

# No deadline per example: the machines are shared and noisy, and a test asserts results, not time.
settings.register_profile("clink", deadline=None)
settings.load_profile("clink")

collect_ignore_glob = ["golden/*/module.py"]  # goldens are data, not tests


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite golden files from the current output (then review the diff)")
    parser.addoption("--soak", action="store_true", help="crash tests: hundreds of kill points instead of 20")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--update-golden")
