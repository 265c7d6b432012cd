"""The job master and workers as Ray actors (``pip install 'clink[ray]'``).

Ray places the actors and reports their death; clink does the rest as in ``cluster.master`` and
``cluster.worker``. What crosses Ray's own calls are plain values (strings, numbers, dicts, lists)
and the artefact's bytes, which every worker checks against their sha256 before it loads the plan
from them; rows cross the Flight data plane (``cluster.dataplane``). Only this module imports Ray.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path

import ray

from clink.cluster.dataplane import FlightInbox, FlightTransport, ResultInbox, ResultSender
from clink.cluster.master import JobFailed, JobMaster, job_error
from clink.cluster.worker import Worker, describe
from clink.errors import UsageError
from clink.runtime.artefact import read_artefact
from clink.runtime.context import RuntimeContext

__all__ = ["NAMESPACE", "RayJob", "list_jobs", "run_on_ray", "submit"]

#: Elements a worker takes ahead of its own thread before its senders wait.
_INBOX = 16
#: The Ray namespace clink's job masters are named in.
NAMESPACE = "clink"


def _extend_path(python_path: list[str]) -> None:
    """The submitting process's import path, where it exists here too (a UDF's module, found
    there through PYTHONPATH or the working directory, is found here the same way)."""
    import sys

    for entry in python_path:
        if entry and entry not in sys.path and os.path.isdir(entry):
            sys.path.append(entry)


def _load(artefact: bytes, digest: str, *, plan: bool = True):
    """The plan in the artefact's bytes, once they match ``digest`` and the artefact verifies
    (``plan=False``: the verified artefact, its module not run)."""
    if hashlib.sha256(artefact).hexdigest() != digest:
        raise ValueError("the artefact's bytes do not match their sha256: refused")
    folder = Path(tempfile.mkdtemp(prefix="clink-artefact-"))
    path = folder / "plan.clk"
    path.write_bytes(artefact)
    try:
        verified = read_artefact(path)
        return verified.plan() if plan else verified
    finally:
        path.unlink()
        folder.rmdir()


@ray.remote
class _WorkerActor:
    def __init__(self, artefact: bytes, digest: str, job: str, attempt: int, secret: str, index: int,
                 workers: int, state_dir: str | None, cwd: str | None, host: str | None,
                 python_path: list[str]) -> None:
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)  # where relative paths in the pipeline point, as for `clink run`
        _extend_path(python_path)
        self.plan = _load(artefact, digest)
        self.job, self.attempt, self.secret, self.index, self.workers = job, attempt, secret, index, workers
        self.state_dir = state_dir
        self._ready = threading.Event()
        self.worker: Worker | None = None
        self.inbox = FlightInbox(host or ray.util.get_node_ip_address(), job=job, attempt=attempt, secret=secret,
                                 deliver=self._deliver)

    def where(self) -> tuple[str, int, str]:
        """Its data plane's location, its process id, its host."""
        return self.inbox.location, os.getpid(), self.inbox.host

    def _deliver(self, target: int, sender: int, element) -> None:
        self._ready.wait()
        self.worker.deliver(target, sender, element)

    def start(self, locations: list[str], master, config: dict, results: str | None = None) -> None:
        """Run the worker's subtasks with ``config`` (the job's settings, with the checkpoint the
        attempt restores from, which only the job master knows). ``results``: where the rows of
        bare ``SELECT`` queries and the text of print sinks go back to the submitter."""
        sender = ResultSender(results, job=self.job, secret=self.secret) if results else None
        ctx = RuntimeContext(config=config, state_dir=Path(self.state_dir) if self.state_dir else None,
                             on_result=sender.send if sender is not None else None)
        if sender is not None:
            ctx.stdout, ctx.stderr = sender.text("stdout"), sender.text("stderr")
        transport = FlightTransport(locations, job=self.job, attempt=self.attempt, secret=self.secret,
                                    schema_of=lambda sid: self.worker.job._node_of[sid].schema)
        attempt, index = self.attempt, self.index

        def report(kind: str, value) -> None:
            master.report.remote(attempt, index, kind, value)

        self.worker = Worker(self.plan, ctx, worker=index, workers=self.workers, transport=transport,
                             report=report, inbox_size=_INBOX)
        if sender is not None:
            self.worker.on_close = sender.close
        self.worker.start()
        self._ready.set()

    def trigger(self, checkpoint_id: int, stop: bool = False) -> None:
        self.worker.trigger(checkpoint_id, stop)

    def commit(self, checkpoint_id: int, handles: dict) -> None:
        self.worker.commit(checkpoint_id, handles)

    def close(self, discard: bool = False) -> None:
        self.worker.close(discard)

    def wait_closed(self) -> None:
        """Returns when the worker's thread has ended; fails if the actor dies first."""
        self._ready.wait()
        self.worker.thread.join()

    def bytes_out(self) -> int:
        return self.worker.transport.bytes_out if self.worker is not None else 0


def _workers(artefact: bytes, digest: str, job: str, attempt: int, secret: str, workers: int, state_dir: str | None,
             cwd: str | None, host: str | None, python_path: list[str], detached: bool = False) -> list:
    """New worker actors for one attempt, spread over the cluster's nodes (a job on several hosts
    uses them all); ``detached``: they outlive the process that made them, as a submitted job does."""
    options = {"num_cpus": 1, "max_concurrency": 8, "scheduling_strategy": "SPREAD"}
    if detached:
        options.update(lifetime="detached", namespace=NAMESPACE)
    return [_WorkerActor.options(**options).remote(artefact, digest, job, attempt, secret, w, workers, state_dir, cwd,
                                                   host, python_path) for w in range(workers)]


class _ActorHandle:
    def __init__(self, actor) -> None:
        self.actor = actor
        self.closed = actor.wait_closed.remote()

    def trigger(self, checkpoint_id: int, stop: bool = False) -> None:
        self.actor.trigger.remote(checkpoint_id, stop)

    def commit(self, checkpoint_id: int, handles: dict) -> None:
        self.actor.commit.remote(checkpoint_id, handles)

    def close(self, discard: bool = False) -> None:
        self.actor.close.remote(discard)

    def stop(self) -> None:
        ray.kill(self.actor, no_restart=True)

    def alive(self) -> bool:
        ready, _ = ray.wait([self.closed], timeout=0)
        if not ready:
            return True
        try:
            ray.get(self.closed)
        except ray.exceptions.RayError:
            return False
        return True


@ray.remote
class _MasterActor:
    """One job: starts each attempt's workers and runs ``JobMaster`` in a thread of its own, so that
    the job goes on after the client that submitted it has gone (``clink submit``)."""

    def __init__(self, artefact: bytes, digest: str, job: str, config: dict, state_dir: str | None,
                 cwd: str | None, workers: int, parallelism: int, fingerprint: str, host: str | None,
                 secret: str, results: str | None, rows: bool, python_path: list[str],
                 first: list | None = None) -> None:
        self.artefact, self.digest, self.job, self.results = artefact, digest, job, results
        self.python_path = python_path
        _extend_path(python_path)
        if rows:
            # Rows already handed back cannot be taken back: a failure fails the job.
            config = {**config, "restart-strategy.type": "none"}
        self.config, self.state_dir, self.cwd, self.workers, self.host = config, state_dir, cwd, workers, host
        try:
            self.name = _load(artefact, digest, plan=False).name  # the workers run the module
            self.load_error = None
        except Exception as exc:  # noqa: BLE001 - the job fails with it, as a worker's would
            self.name, self.load_error = job, describe(exc)
        self.secret = secret
        #: The first attempt's workers, started by the submitter while this actor was starting.
        self.first = first
        self.handles: list[_ActorHandle] = []
        self.log: list[str] = []
        self.master = JobMaster(self._launch, workers=workers, parallelism=parallelism, fingerprint=fingerprint,
                                config=config, state_dir=state_dir, log=self.log.append)
        self.pids: list[int] = []
        self.submitted = time.time()
        self.outcome: dict | None = None
        self._thread = threading.Thread(target=self._run, name=f"clink-master-{job}", daemon=True)
        self._thread.start()

    def report(self, attempt: int, worker: int, kind: str, value) -> None:
        self.master.report(attempt, worker, kind, value)

    def _launch(self, attempt: int, restore: str | None, report, workers: int) -> list[_ActorHandle]:
        for handle in self.handles:
            handle.stop()
        self.workers = workers
        config = {k: v for k, v in self.config.items() if k != "execution.savepoint.path"}
        config["parallelism.default"] = str(workers)
        if restore is not None:
            config["execution.savepoint.path"] = restore
        actors, self.first = self.first, None
        if actors is None or attempt != 1 or len(actors) != workers:
            for actor in actors or ():
                ray.kill(actor, no_restart=True)
            actors = _workers(self.artefact, self.digest, self.job, attempt, self.secret, workers, self.state_dir,
                              self.cwd, self.host, self.python_path)
        locations, self.pids, hosts = (list(column) for column in zip(*ray.get([a.where.remote() for a in actors]),
                                                                        strict=True))
        self.master.hosts = dict(enumerate(hosts))
        me = ray.get_runtime_context().current_actor
        ray.get([a.start.remote(locations, me, config, self.results) for a in actors])
        self.handles = [_ActorHandle(a) for a in actors]
        return self.handles

    def worker_pids(self) -> list[int]:
        return list(self.pids)

    def pid(self) -> int:
        return os.getpid()

    def stop(self, with_checkpoint: bool) -> None:
        self.master.command("stop", with_checkpoint)

    def rescale(self, parallelism: int) -> None:
        self.master.command("rescale", parallelism)

    def status(self) -> dict:
        """Plain values for ``clink jobs``."""
        m = self.master
        completed = m.coordinator.completed if m.coordinator is not None else []
        return {"id": self.job, "name": self.name, "state": m.state, "parallelism": m.workers,
                "attempt": m.attempt, "restarts": len(m.failures), "submitted": self.submitted,
                "last_checkpoint": completed[-1] if completed else None, "checkpoint_ms": m.checkpoint_ms[-20:],
                "stopped_at": m.stopped_at, "state_dir": self.state_dir, "workers": dict(m.live),
                "hosts": dict(m.hosts),
                "failures": [f.splitlines()[0] for f in m.failures], "log": list(self.log)}

    def _run(self) -> None:
        started = time.perf_counter()
        if self.load_error is not None:
            for actor in self.first or ():
                ray.kill(actor, no_restart=True)
            self.master.state = "failed"
            self.outcome = {"ok": False, "error": self.load_error, "log": self.log}
            return
        try:
            metrics = self.master.run()
        except JobFailed as exc:
            self.outcome = {"ok": False, "error": str(exc), "log": self.log}
            return
        except BaseException as exc:  # noqa: BLE001 - the client shows it
            self.master.state = "failed"
            self.outcome = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "log": self.log}
            return
        finally:
            for actor in self.first or ():  # a job stopped before it started
                ray.kill(actor, no_restart=True)
            for handle in self.handles:
                try:
                    handle.stop()
                except Exception:  # noqa: BLE001 - already gone
                    pass
        records_in: dict[str, int] = {}
        records_out: dict[str, int] = {}
        for m in metrics.values():
            for table, n in m["records_in"].items():
                records_in[table] = records_in.get(table, 0) + n
            for table, n in m["records_out"].items():
                records_out[table] = records_out.get(table, 0) + n
        master = self.master
        self.outcome = {
            "ok": True, "state": master.state, "stopped_at": master.stopped_at, "records_in": records_in,
            "records_out": records_out, "attempts": master.attempt, "failures": master.failures,
            "warnings": master.warnings, "restored_from": master.restored_from,
            "checkpoints": len(master.coordinator.completed) if master.coordinator else 0,
            "up_at": master.up_at, "first_output_at": master.first_output_at, "hosts": master.hosts,
            "bytes_out": sum(m.get("bytes_out", 0) for m in metrics.values()),
            "seconds": time.perf_counter() - started, "log": self.log}

    def result(self) -> dict:
        """Waits for the job's end."""
        self._thread.join()
        return self.outcome


class RayJob:
    """A job on Ray: its job master actor, found by id (``clink jobs``, ``clink stop``)."""

    def __init__(self, master, job_id: str) -> None:
        self.master = master
        self.id = job_id
        self._result = None
        self.results_inbox = None

    @classmethod
    def find(cls, job_id: str) -> RayJob:
        try:
            return cls(ray.get_actor(job_id, namespace=NAMESPACE), job_id)
        except ValueError:
            raise UsageError(f"no job {job_id!r} on this Ray cluster (clink jobs lists them)") from None

    def worker_pids(self) -> list[int]:
        return ray.get(self.master.worker_pids.remote())

    def status(self) -> dict:
        return ray.get(self.master.status.remote())

    def stop(self, *, with_checkpoint: bool) -> dict:
        ray.get(self.master.stop.remote(with_checkpoint))
        return self.result()

    def rescale(self, parallelism: int) -> None:
        ray.get(self.master.rescale.remote(parallelism))

    def done(self) -> bool:
        """Whether the job has ended (finished, failed or stopped)."""
        if self._result is None:
            self._result = self.master.result.remote()
        ready, _ = ray.wait([self._result], timeout=0)
        return bool(ready)

    def result(self) -> dict:
        """Wait for the job's end; raises ``JobFailed`` (or the pipeline's own error) if it failed."""
        if self._result is None:
            self._result = self.master.result.remote()
        outcome = ray.get(self._result)
        if self.results_inbox is not None:
            self.results_inbox.shutdown()
            self.results_inbox = None
        if not outcome["ok"]:
            raise job_error(outcome["error"])
        return outcome


def list_jobs() -> list[dict]:
    """The status of every clink job on the connected Ray cluster, newest first."""
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a.get("namespace") == NAMESPACE and a["name"].startswith("clink-")]
    jobs = []
    for name in names:
        try:
            jobs.append(RayJob.find(name).status())
        except (UsageError, ray.exceptions.RayError):
            continue
    return sorted(jobs, key=lambda j: j["submitted"], reverse=True)


def data_plane_host(started_here: bool) -> str | None:
    """Where workers' data streams listen: the loopback address when Ray was started here for
    one job, else (None) the address Ray gives each worker's node."""
    return "127.0.0.1" if started_here else None


def ensure_ray(address: str | None, *, workers: int) -> bool:
    """Connect to the Ray cluster at ``address`` (or ``RAY_ADDRESS``), or start one for this
    process; True when it was started here (and should be stopped after the job)."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    quiet = {"log_to_driver": False, "logging_level": "error", "configure_logging": True}
    if address:
        ray.init(address=address, namespace=NAMESPACE, **quiet)
        return False
    # address="local": a new runtime, even when another Ray runs on this machine.
    ray.init(address="local", num_cpus=max(workers, os.cpu_count() or 1), include_dashboard=False, namespace=NAMESPACE,
             _node_ip_address="127.0.0.1", **quiet)
    return True


def submit(artefact: bytes, *, config: dict, state_dir: str | None, workers: int, parallelism: int,
           fingerprint: str, cwd: str | None = None, host: str | None = None, detached: bool = False,
           on_result=None, on_print=None) -> RayJob:
    """Start a job master for the artefact on the connected Ray cluster; ``detached``: it outlives
    this process (``clink submit``). ``on_result(query, batch)`` gets the rows of the plan's bare
    ``SELECT`` queries, sent back from the worker that runs their sink; ``on_print(stream, text)``
    the text of its print sinks (``stream`` is ``"stdout"`` or ``"stderr"``), which otherwise
    goes to the workers' own logs."""
    digest = hashlib.sha256(artefact).hexdigest()
    job_id = f"clink-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    secret = secrets.token_hex(16)
    results = None
    if on_result is not None or on_print is not None:
        inbox = ResultInbox(host or ray.util.get_node_ip_address(), job=job_id, secret=secret, deliver=on_result,
                            printed=on_print)
        results = inbox.location
    options = {"num_cpus": 0, "max_concurrency": 16, "name": job_id, "namespace": NAMESPACE}
    if detached:
        options["lifetime"] = "detached"
    import sys

    # The first attempt's workers start alongside the job master, not after it: starting a Ray
    # actor's process is most of the time to a job's first row.
    first = _workers(artefact, digest, job_id, 1, secret, workers, state_dir, cwd, host, list(sys.path),
                     detached=detached)
    master = _MasterActor.options(**options).remote(
        artefact, digest, job_id, config, state_dir, cwd, workers, parallelism, fingerprint, host, secret, results,
        on_result is not None, list(sys.path), first)
    job = RayJob(master, job_id)
    if results is not None:
        job.results_inbox = inbox  # served while the job runs
    return job


def run_on_ray(artefact: bytes, *, config: dict, state_dir: str | None, fingerprint: str,
               cwd: str | None = None, on_result=None, on_print=None) -> dict:
    """Run the artefact's job on Ray to its end (``'parallelism.default'`` workers, one subtask of
    each operator per worker); start a Ray runtime for it if none is reachable."""
    parallelism = int(config.get("parallelism.default") or 1)
    started = ensure_ray(config.get("ray.address"), workers=parallelism)
    try:
        return submit(artefact, config=config, state_dir=state_dir, workers=parallelism, parallelism=parallelism,
                      fingerprint=fingerprint, cwd=cwd, host=data_plane_host(started), on_result=on_result,
                      on_print=on_print).result()
    finally:
        if started:
            ray.shutdown()
