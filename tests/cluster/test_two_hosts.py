"""One job on two hosts: a Ray head node and a worker node in two Linux network namespaces, joined
by a veth pair with addresses in 127.0.0.0/8, with Ray's token authentication on (one token file,
given to both nodes and to the client, as a multi-host cluster shares it). `clink run --target ray`
from the head's namespace places one worker on each node; the rows are a local run's.

Skipped, saying why, where network namespaces cannot be made (not root, no `ip`)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from nexmark_cases import BENCH, CSV, QUERIES, SQLITE, assert_local_run_gives, output

RAY = str(Path(sys.executable).with_name("ray"))
pytestmark = pytest.mark.cluster


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory):
    """(environment for the client, the head's address, the head's namespace)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("two hosts need network namespaces: root and the `ip` command (iproute2)")
    tag = f"{os.getpid() % 10000}"
    a, b = f"clinkA{tag}", f"clinkB{tag}"
    net = 20 + os.getpid() % 200
    head, node = f"127.{net}.0.1", f"127.{net}.0.2"
    made = _ip("netns", "add", a)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    _ip("netns", "add", b)
    folder = tmp_path_factory.mktemp("two-hosts")
    token = folder / "ray-token"
    token.write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    try:
        for step in (["link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}"],
                     ["link", "set", f"va{tag}", "netns", a], ["link", "set", f"vb{tag}", "netns", b],
                     ["-n", a, "addr", "add", f"{head}/24", "dev", f"va{tag}"],
                     ["-n", b, "addr", "add", f"{node}/24", "dev", f"vb{tag}"],
                     ["-n", a, "link", "set", f"va{tag}", "up"], ["-n", b, "link", "set", f"vb{tag}", "up"],
                     ["-n", a, "link", "set", "lo", "up"], ["-n", b, "link", "set", "lo", "up"]):
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        for ns, dev in ((a, f"va{tag}"), (b, f"vb{tag}")):
            # Addresses in 127.0.0.0/8 are routed between the namespaces only with route_localnet.
            for key in ("all", dev):
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.conf.{key}.route_localnet=1"],
                               check=True)
        port = 6400 + os.getpid() % 1000
        started = subprocess.run(["ip", "netns", "exec", a, RAY, "start", "--head", f"--node-ip-address={head}",
                                  f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                                  "--disable-usage-stats"], env=env, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr[-2000:]
        joined = subprocess.run(["ip", "netns", "exec", b, RAY, "start", f"--address={head}:{port}",
                                 f"--node-ip-address={node}", "--num-cpus=2", "--disable-usage-stats"],
                                env=env, capture_output=True, text=True, timeout=120)
        assert joined.returncode == 0, joined.stderr[-2000:]
        yield env, f"{head}:{port}", a, (head, node)
    finally:
        # `ray stop` would stop every Ray on the machine (the test session's too): stop what runs
        # in these namespaces only.
        for ns in (a, b):
            pids = _ip("netns", "pids", ns).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
            _ip("netns", "del", ns)
        # `ray start` left its address for clients that look for a cluster on this machine.
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.exists() and head in current.read_text():
            current.unlink()


def test_one_job_spans_two_hosts(two_hosts, tmp_path: Path) -> None:
    env, address, head_namespace, (head, node) = two_hosts
    (tmp_path / "ddl.sql").write_text((BENCH / "ddl.sql").read_text().replace("'events.num' = '10000000'",
                                                                              "'events.num' = '200000'"))
    (tmp_path / "q7.sql").write_text(QUERIES["q7"].format(csv=CSV, sqlite=SQLITE) + "\n")
    run = subprocess.run(["ip", "netns", "exec", head_namespace, sys.executable, "-m", "clink", "run", "-i", "ddl.sql",
                          "q7.sql", "--target", "ray", "--ray-address", address, "-p", "2", "--state-dir", "state",
                          "--set", "execution.checkpointing.interval=200 ms"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    hosts = re.search(r"on 2 worker\(s\) at (.*?);", run.stderr)
    assert hosts and set(hosts[1].split(", ")) == {head, node}, run.stderr
    assert_local_run_gives(output(tmp_path / "out"), tmp_path, "q7.sql")


def test_a_client_without_the_clusters_token_is_refused(two_hosts, tmp_path: Path) -> None:
    env, address, head_namespace, _ = two_hosts
    wrong = tmp_path / "wrong-token"
    wrong.write_text(secrets.token_hex(32))
    (tmp_path / "t.sql").write_text("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n"
                                    "CREATE TABLE s (a INT) WITH ('connector' = 'blackhole');\nINSERT INTO s SELECT a FROM t;\n")
    run = subprocess.run(["ip", "netns", "exec", head_namespace, sys.executable, "-m", "clink", "submit", "t.sql",
                          "--ray-address", address], cwd=tmp_path,
                         env={**env, "RAY_AUTH_TOKEN_PATH": str(wrong)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert f"cannot reach the Ray cluster at {address}" in run.stderr and "token" in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
