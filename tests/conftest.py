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
# The S3 server of the checkpoint tests takes any key; set before Ray starts, so that its workers
# have them too, and with EC2's metadata lookup off (no such service on a loopback-only machine).
for _key, _value in (("AWS_ACCESS_KEY_ID", "clink-tests"), ("AWS_SECRET_ACCESS_KEY", "clink-tests"),
                     ("AWS_EC2_METADATA_DISABLED", "true")):
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3-protocol server (moto's) on a loopback port, for the session: ``HOST:PORT``."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"{host}:{port}"
    server.stop()


@pytest.fixture
def s3_uri(s3_endpoint: str, request: pytest.FixtureRequest):
    """``s3_uri(path)``: the URI of ``path`` in a bucket of this test's own on the S3 server."""
    import hashlib
    import re

    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:10]
    bucket = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:40].strip("-") + "-" + digest

    def uri(path: str) -> str:
        return (f"s3://{bucket}/{path}?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
                "&allow_bucket_creation=true")
    return uri


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


#: Test folders that run against real servers the tests start (Kafka, PostgreSQL, Redis): a test
#: there that skips (its server would not start, a library is missing) fails instead, so a run
#: that proved nothing about the servers cannot pass.
SERVER_SUITES = ("kafka", "postgres", "redis_connector", "connector_contract", "end_to_end")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.path.parent.name in SERVER_SUITES and item.path.parent.parent.name == "tests":
        report.outcome = "failed"
        report.longrepr = f"a test against a real server skipped, which counts as a failure: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    report = outcome.get_result()
    path = getattr(collector, "path", None)
    if report.skipped and path is not None and path.parent.name in SERVER_SUITES and path.parent.parent.name == "tests":
        report.outcome = "failed"
        report.longrepr = f"a module of tests against a real server skipped, which counts as a failure: {report.longrepr}"
