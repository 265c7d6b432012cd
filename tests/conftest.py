"""Shared fixtures and options."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# No deadline per example: the machines are shared and noisy, and a test asserts results, not time.
settings.register_profile("clink", deadline=None)
settings.load_profile("clink")

collect_ignore_glob = ["golden/*/module.py"]  # goldens are data, not tests

# The Ray runtime the tests start listens on the loopback address only: with this set before Ray
# is imported, Ray takes 127.0.0.1 as the node's address instead of the network interface's.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def ray_cluster():
    """One Ray runtime for every test that runs a job on Ray (started on first use)."""
    import ray
    import ray._private.worker as ray_worker

    # The tests kill workers on purpose: Ray's note on each death (printed by the driver, whatever
    # log_to_driver says) is noise here; the job master's own record of failures is what they read.
    printed = ray_worker.print_to_stdstream

    def quieter(data, *args, **kwargs):
        if data.get("pid") == "raylet" and any("A worker died or was killed" in line for line in data["lines"]):
            return None
        return printed(data, *args, **kwargs)

    ray_worker.print_to_stdstream = quieter
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level="error",
             namespace="clink-tests")
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    yield ray
    ray.shutdown()
    ray_worker.print_to_stdstream = printed


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite golden files from the current output (then review the diff)")
    parser.addoption("--soak", action="store_true", help="crash tests: hundreds of kill points instead of 20")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--update-golden")
