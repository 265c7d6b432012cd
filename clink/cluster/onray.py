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
import sys
import tempfile
import threading
import time
from pathlib import Path

import ray

from clink.cluster.dataplane import FlightInbox, FlightTransport, ResultInbox, ResultSender
from clink.cluster.master import JobFailed, JobMaster, headline, job_error
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
    """A worker's process. It runs one job's share at a time: ``prepare`` loads the job's plan and
    opens its data plane, ``start`` runs it; after a job that ended cleanly, ``release`` readies it
    for the next job of the same client (``_Pool``), which so starts without a new process."""

    def __init__(self) -> None:
        self._prepared = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.worker: Worker | None = None
        self.inbox: FlightInbox | None = None

    def prepare(self, artefact: bytes, digest: str, job: str, attempt: int, secret: str, index: int,
                workers: int, state_dir: str | None, cwd: str | None, host: str | None,
                python_path: list[str]) -> None:
        try:
            if cwd and os.path.isdir(cwd):
                os.chdir(cwd)  # where relative paths in the pipeline point, as for `clink run`
            _extend_path(python_path)
            self.plan = _load(artefact, digest)
            self.job, self.attempt, self.secret, self.index, self.workers = job, attempt, secret, index, workers
            self.state_dir = state_dir
            self.inbox = FlightInbox(host or ray.util.get_node_ip_address(), job=job, attempt=attempt,
                                     secret=secret, deliver=self._deliver)
        except BaseException as exc:  # noqa: BLE001 - ``where`` raises it to the job master
            self._error = exc
        finally:
            self._prepared.set()

    def where(self) -> tuple[str, int, str]:
        """Its data plane's location, its process id, its host (once prepared)."""
        self._prepared.wait()
        if self._error is not None:
            raise self._error
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
        job, attempt, index = self.job, self.attempt, self.index

        def report(kind: str, value) -> None:
            master.report.remote(job, attempt, index, kind, value)

        self.worker = Worker(self.plan, ctx, worker=index, workers=self.workers, transport=transport,
                             report=report, inbox_size=_INBOX)
        if sender is not None:
            self.worker.on_close = sender.close
        self.worker.start()
        self._ready.set()

    def trigger(self, checkpoint_id: int, stop: bool = False) -> None:
        self.worker.trigger(checkpoint_id, stop)

    def commit(self, checkpoint_id: int, handles: dict, close: bool = False) -> None:
        self.worker.commit(checkpoint_id, handles)
        if close:
            self.worker.close()

    def close(self, discard: bool = False) -> None:
        self.worker.close(discard)

    def wait_closed(self) -> None:
        """Returns when the worker's thread has ended; fails if the actor dies first."""
        self._ready.wait()
        self.worker.thread.join()

    def bytes_out(self) -> int:
        return self.worker.transport.bytes_out if self.worker is not None else 0

    def release(self) -> bool:
        """After its job has closed: end its streams and its data plane, and forget the job.
        False (and nothing changes) while the job still runs here."""
        if not self._prepared.is_set() or self._error is not None:
            return False
        if self.worker is not None:
            if self.worker.thread is not None and self.worker.thread.is_alive():
                return False
            if self.worker.job is not None:
                # Its state's connections close now, not when collected: closing a SQLite
                # database removes its -wal file by name, which the next job may have made anew.
                self.worker.job.cancel()
            self.worker.transport.close()
        self.inbox.shutdown()
        self.worker = self.inbox = self.plan = None
        self._prepared.clear()
        self._ready.clear()
        return True


def _workers(count: int, detached: bool = False) -> list:
    """New worker actors, spread over the cluster's nodes (a job on several hosts uses them all);
    ``detached``: they outlive the process that made them, as a submitted job does."""
    options = {"num_cpus": 1, "max_concurrency": 8, "scheduling_strategy": "SPREAD"}
    if detached:
        options.update(lifetime="detached", namespace=NAMESPACE)
    return [_WorkerActor.options(**options).remote() for _ in range(count)]


def _prepare(actors: list, artefact: bytes, digest: str, job: str, attempt: int, secret: str,
             state_dir: str | None, cwd: str | None, host: str | None, python_path: list[str]) -> list:
    """Have worker actors load the job's plan (worker ``w`` is ``actors[w]``); ``where`` waits for it."""
    return [actor.prepare.remote(artefact, digest, job, attempt, secret, w, len(actors), state_dir, cwd, host,
                                 python_path) for w, actor in enumerate(actors)]


class _ActorHandle:
    def __init__(self, actor) -> None:
        self.actor = actor
        self.closed = actor.wait_closed.remote()

    def trigger(self, checkpoint_id: int, stop: bool = False) -> None:
        self.actor.trigger.remote(checkpoint_id, stop)

    def commit(self, checkpoint_id: int, handles: dict, close: bool = False) -> None:
        """Commit; ``close``: then close, in the same call, since calls to an actor with threads
        are not ordered (a close that overtook the last commit would drop the last output)."""
        self.actor.commit.remote(checkpoint_id, handles, close)

    def close(self, discard: bool = False) -> None:
        self.actor.close.remote(discard)

    def stop(self) -> None:
        """Kill the worker and wait (5 s at most) until its process is gone, so that nothing of it
        runs on while the next attempt clears the working state and starts."""
        ray.kill(self.actor, no_restart=True)
        ray.wait([self.closed], timeout=5)

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
    """Runs a job (``begin``): starts each attempt's workers and runs ``JobMaster`` in a thread of
    its own, so that the job goes on after the client that submitted it has gone (``clink
    submit``). An attached job's master is used again for its client's next job (``_Pool``)."""

    def __init__(self) -> None:
        self.job: str | None = None
        self.master: JobMaster | None = None
        self._thread: threading.Thread | None = None
        self.outcome: dict | None = None
        #: Set once ``begin`` has run: calls to an actor with threads of its own may overtake it.
        self._begun = threading.Event()

    def begin(self, artefact: bytes, digest: str, job: str, config: dict, state_dir: str | None,
              cwd: str | None, workers: int, parallelism: int, fingerprint: str, host: str | None,
              secret: str, results: str | None, rows: bool, python_path: list[str],
              first: list | None = None, keep: bool = False) -> None:
        """Run a job. ``first``: the first attempt's workers, which the submitter started while this
        actor started; ``keep``: they go back to the submitter when the job ends cleanly."""
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
        self.first, self.keep = first, keep
        self.handles: list[_ActorHandle] = []
        self.log: list[str] = []
        self.pids: list[int] = []
        self.submitted = time.time()
        self.outcome = None
        try:
            self.master = JobMaster(self._launch, workers=workers, parallelism=parallelism, fingerprint=fingerprint,
                                    config=config, state_dir=state_dir, log=self.log.append)
        except Exception as exc:  # noqa: BLE001 - a wrong setting: the job fails with it
            self.master = None
            self.load_error = describe(exc)
        self._thread = threading.Thread(target=self._run, name=f"clink-master-{job}", daemon=True)
        self._thread.start()
        self._begun.set()

    def artefact_bytes(self) -> bytes | None:
        """The artefact the job runs (its plan and SQL, for the dashboard); None between jobs."""
        self._begun.wait()
        return getattr(self, "artefact", None)

    def reset(self) -> None:
        """Forget the ended job (its client has its result): ready for the next."""
        if self._thread is not None:
            self._thread.join()
        self._begun.clear()
        self.job = self.master = self._thread = self.outcome = None
        self.handles, self.first, self.pids = [], None, []

    def report(self, job: str, attempt: int, worker: int, kind: str, value) -> None:
        """What a worker says. Calls to an actor with threads are not ordered: a report of this
        actor's previous job (a kept master) may come late, and is dropped by its job's id."""
        master = self.master
        if job == self.job and master is not None:
            master.report(attempt, worker, kind, value)

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
            actors = _workers(workers)
            _prepare(actors, self.artefact, self.digest, self.job, attempt, self.secret, self.state_dir, self.cwd,
                      self.host, self.python_path)
        locations, self.pids, hosts = (list(column) for column in zip(*ray.get([a.where.remote() for a in actors]),
                                                                        strict=True))
        self.master.hosts = dict(enumerate(hosts))
        me = ray.get_runtime_context().current_actor
        ray.get([a.start.remote(locations, me, config, self.results) for a in actors])
        self.handles = [_ActorHandle(a) for a in actors]
        return self.handles

    def worker_pids(self) -> list[int]:
        self._begun.wait()
        return list(self.pids)

    def pid(self) -> int:
        return os.getpid()

    def stop(self, with_checkpoint: bool) -> None:
        self._begun.wait()
        if self.master is not None:
            self.master.command("stop", with_checkpoint)

    def rescale(self, parallelism: int) -> None:
        self._begun.wait()
        if self.master is not None:
            self.master.command("rescale", parallelism)

    def status(self) -> dict | None:
        """Plain values for ``clink jobs`` (None between jobs)."""
        m = self.master
        if not self._begun.is_set():
            return None
        if m is None:  # its settings were refused
            return {"id": self.job, "name": self.name, "state": "failed", "parallelism": self.workers, "attempt": 0,
                    "restarts": 0, "submitted": self.submitted, "last_checkpoint": None, "checkpoint_ms": [],
                    "stopped_at": None, "state_dir": self.state_dir, "workers": {}, "hosts": {},
                    "failures": [headline(self.load_error)], "log": list(self.log)}
        completed = m.coordinator.completed if m.coordinator is not None else []
        return {"id": self.job, "name": self.name, "state": m.state, "parallelism": m.workers,
                "attempt": m.attempt, "restarts": len(m.failures), "submitted": self.submitted,
                "last_checkpoint": completed[-1] if completed else None, "checkpoint_ms": m.checkpoint_ms[-20:],
                "stopped_at": m.stopped_at, "state_dir": self.state_dir, "workers": dict(m.live),
                "hosts": dict(m.hosts), "checkpoint_history": list(m.checkpoint_history),
                "failures": [headline(f) for f in m.failures], "log": list(self.log)}

    def _run(self) -> None:
        started = time.perf_counter()
        if self.load_error is not None:
            for actor in self.first or ():
                ray.kill(actor, no_restart=True)
            if self.master is not None:
                self.master.state = "failed"
            self.outcome = {"ok": False, "error": self.load_error, "log": self.log}
            return
        clean = False
        try:
            metrics = self.master.run()
            # The workers of a first attempt that ended cleanly go back to the client for its next job.
            clean = self.keep and self.master.attempt == 1
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
            for handle in () if clean else self.handles:
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
        """Waits for the job's end: its outcome, with the last status and worker processes (the
        client keeps them, as this actor may go on to another job)."""
        self._begun.wait()
        self._thread.join()
        return {**self.outcome, "status": self.status(), "pids": list(self.pids)}


class RayJob:
    """A job on Ray: its job master actor, found by id (``clink jobs``, ``clink stop``).
    ``pooled``: the first attempt's workers, which go back to this process's pool with the job
    master when the job ends cleanly."""

    def __init__(self, master, job_id: str, pooled: list | None = None, begun=None) -> None:
        self.master = master
        self.id = job_id
        self._result = None
        #: Once the job has ended: what its job master said last.
        self._outcome: dict | None = None
        self.results_inbox = None
        self._pooled = pooled
        #: The call that gives the job master its job: what this client asks after it waits for it.
        self._begun = begun

    def _master(self):
        if self._begun is not None:
            ray.get(self._begun)
            self._begun = None
        return self.master

    @classmethod
    def find(cls, job_id: str) -> RayJob:
        try:
            return cls(ray.get_actor(job_id, namespace=NAMESPACE), job_id)
        except ValueError:
            pass
        for name in _master_names():  # the job may run on a master kept for its client's jobs
            try:
                master = ray.get_actor(name, namespace=NAMESPACE)
                status = ray.get(master.status.remote())
            except (ValueError, ray.exceptions.RayError):
                continue
            if status is not None and status["id"] == job_id:
                return cls(master, job_id)
        raise UsageError(f"no job {job_id!r} on this Ray cluster (clink jobs lists them)")

    def worker_pids(self) -> list[int]:
        if self._outcome is not None:
            return list(self._outcome["pids"])
        return ray.get(self._master().worker_pids.remote())

    def status(self) -> dict:
        if self._outcome is not None:
            return self._outcome["status"]
        return ray.get(self._master().status.remote())

    def stop(self, *, with_checkpoint: bool) -> dict:
        self.ask_stop(with_checkpoint=with_checkpoint)
        return self.result()

    def ask_stop(self, *, with_checkpoint: bool) -> None:
        """Tell the job to stop, without waiting for it to end (``result`` waits)."""
        ray.get(self._master().stop.remote(with_checkpoint))

    def rescale(self, parallelism: int) -> None:
        ray.get(self._master().rescale.remote(parallelism))

    def artefact(self):
        """The job's artefact (``clink.runtime.artefact.Artefact``), as its job master has it."""
        from clink.runtime.artefact import read_artefact

        data = ray.get(self._master().artefact_bytes.remote())
        if data is None:
            raise UsageError(f"job {self.id} has no artefact on its job master any more")
        folder = Path(tempfile.mkdtemp(prefix="clink-artefact-"))
        (folder / "plan.clk").write_bytes(data)
        return read_artefact(folder / "plan.clk")

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
        outcome = self._outcome = ray.get(self._result)
        if self.results_inbox is not None:
            self.results_inbox.shutdown()
            self.results_inbox = None
        if self._pooled is not None:
            pooled, self._pooled = self._pooled, None
            _POOL.give_back(self.master, pooled if outcome["ok"] and outcome["attempts"] == 1 else [])
        if not outcome["ok"]:
            raise job_error(outcome["error"])
        return outcome


class _Pool:
    """The job masters and workers of this process's ended jobs, kept for its next jobs on the
    same Ray runtime: a job that finds them starts without starting processes, most of a short
    job's time. Kept for ``IDLE_S`` at most, since an idle worker still holds its CPU in Ray."""

    IDLE_S = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runtime = None
        self._masters: list[tuple[float, object]] = []
        self._workers: list[tuple[float, object]] = []

    def _here(self) -> None:
        """Forget actors of an earlier Ray runtime (shut down since); drop those idle too long."""
        runtime = ray.get_runtime_context().get_job_id()
        if runtime != self._runtime:
            self._runtime, self._masters, self._workers = runtime, [], []
        now = time.monotonic()
        for kept in (self._masters, self._workers):
            stale = [actor for since, actor in kept if now - since > self.IDLE_S]
            kept[:] = [(since, actor) for since, actor in kept if now - since <= self.IDLE_S]
            for actor in stale:
                ray.kill(actor, no_restart=True)

    def take(self, workers: int) -> tuple[object | None, list]:
        """A kept job master (or None) and up to ``workers`` kept workers."""
        with self._lock:
            self._here()
            master = self._masters.pop()[1] if self._masters else None
            taken = [actor for _, actor in self._workers[:workers]]
            del self._workers[:workers]
            return master, taken

    def give_back(self, master, workers: list) -> None:
        """Keep a job master and those of its workers that are ready for another job."""
        try:
            ray.get(master.reset.remote(), timeout=10)
            ready = ray.get([actor.release.remote() for actor in workers], timeout=10)
        except ray.exceptions.RayError:
            return  # gone or stuck: not kept
        now = time.monotonic()
        with self._lock:
            self._here()
            self._masters.append((now, master))
            self._workers.extend((now, actor) for actor, ok in zip(workers, ready, strict=True) if ok)
        timer = threading.Timer(self.IDLE_S + 1, self._prune)
        timer.daemon = True
        timer.start()

    def _prune(self) -> None:
        with self._lock:
            if ray.is_initialized():
                self._here()

    def clear(self) -> None:
        """Before Ray shuts down here: its actors go with it."""
        with self._lock:
            self._masters, self._workers = [], []

    def kill(self) -> None:
        """End the kept actors now (their processes exit)."""
        with self._lock:
            kept = [actor for _, actor in (*self._masters, *self._workers)]
            self._masters, self._workers = [], []
        for actor in kept:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - gone already
                pass


_POOL = _Pool()


def _master_names() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == NAMESPACE and a["name"].startswith("clink-")]


def list_jobs() -> list[dict]:
    """The status of every clink job on the connected Ray cluster, newest first."""
    jobs = []
    for name in _master_names():
        try:
            status = ray.get(ray.get_actor(name, namespace=NAMESPACE).status.remote())
        except (ValueError, ray.exceptions.RayError):
            continue
        if status is not None:
            jobs.append(status)
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
    python_path = list(sys.path)
    master, actors = _POOL.take(workers) if not detached else (None, [])
    if master is None:
        options = {"num_cpus": 0, "max_concurrency": 16, "namespace": NAMESPACE,
                   # an attached job's master may run this client's later jobs too, so its name
                   # is the session's; RayJob.find looks it up by the job it runs
                   "name": job_id if detached else f"clink-session-{secrets.token_hex(4)}"}
        if detached:
            options["lifetime"] = "detached"
        master = _MasterActor.options(**options).remote()
    # The first attempt's workers start alongside the job master, not after it: starting a Ray
    # actor's process is most of the time to a job's first row.
    actors += _workers(workers - len(actors), detached=detached)
    calls = _prepare(actors, artefact, digest, job_id, 1, secret, state_dir, cwd, host, python_path)
    calls.append(master.begin.remote(artefact, digest, job_id, config, state_dir, cwd, workers, parallelism,
                                     fingerprint, host, secret, results, on_result is not None, python_path, actors,
                                     not detached))
    if detached:
        # Calls still on their way when this process exits are lost with it: a submitted job has
        # them delivered before its client goes.
        ray.get(calls)
    job = RayJob(master, job_id, pooled=None if detached else actors, begun=calls[-1])
    if results is not None:
        job.results_inbox = inbox  # served while the job runs
    return job


def run_on_ray(artefact: bytes, *, config: dict, state_dir: str | None, fingerprint: str,
               cwd: str | None = None, on_result=None, on_print=None, on_submitted=None) -> dict:
    """Run the artefact's job on Ray to its end (``'parallelism.default'`` workers, one subtask of
    each operator per worker); start a Ray runtime for it if none is reachable. ``on_submitted``
    gets the ``RayJob`` once it is submitted, before waiting for its end."""
    parallelism = int(config.get("parallelism.default") or 1)
    started = ensure_ray(config.get("ray.address"), workers=parallelism)
    try:
        job = submit(artefact, config=config, state_dir=state_dir, workers=parallelism, parallelism=parallelism,
                     fingerprint=fingerprint, cwd=cwd, host=data_plane_host(started), on_result=on_result,
                     on_print=on_print)
        if on_submitted is not None:
            on_submitted(job)
        return job.result()
    finally:
        if started:
            end_runtime()


def forget_kept_actors() -> None:
    """End the actors kept from this process's last jobs: its next job starts its own processes,
    as a client's first job does (what a benchmark of a job's start measures)."""
    _POOL.kill()


def end_runtime() -> None:
    """Stop the Ray runtime this process started for a job, and forget the actors kept on it."""
    _POOL.clear()
    ray.shutdown()
