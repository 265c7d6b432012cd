"""Workers as threads of this process, joined by in-memory channels.

The same job master and workers as on Ray, without Ray or a network: what tests use to check the
protocol (barriers aligned across workers, checkpoints put together by the job master, restarts)
quickly and deterministically enough, and a way to see a plan's subtasks spread over workers.
Python runs one thread at a time, so this is not faster than one worker.
"""

from __future__ import annotations

import threading

from clink.cluster.master import JobMaster
from clink.cluster.worker import Worker
from clink.runtime.context import RuntimeContext
from clink.runtime.elements import Element
from clink.runtime.plan import Plan

__all__ = ["InMemoryTransport", "run_in_threads"]


class InMemoryTransport:
    """Elements go straight into the receiving worker's inbox (one queue: in order per channel)."""

    def __init__(self, workers: list[Worker | None]) -> None:
        self.workers = workers

    def send(self, worker: int, target: int, sender: int, element: Element) -> None:
        self.workers[worker].deliver(target, sender, element)

    def has_credit(self) -> bool:
        return True

    def flush(self) -> None:
        pass


class _ThreadHandle:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def trigger(self, checkpoint_id: int, stop: bool = False) -> None:
        self.worker.trigger(checkpoint_id, stop)

    def commit(self, checkpoint_id: int, handles: dict, close: bool = False) -> None:
        self.worker.commit(checkpoint_id, handles)
        if close:
            self.worker.close()

    def close(self, discard: bool = False) -> None:
        self.worker.close(discard)

    def stop(self) -> None:
        """Stop the worker and wait (a while) for its thread to end, so a restarted attempt never
        runs beside the stopped one's last step, cancelling sinks and state it shares a folder with."""
        self.worker.stop()
        thread = self.worker.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def alive(self) -> bool:
        return self.worker.thread is not None and self.worker.thread.is_alive()


def run_in_threads(plan: Plan, ctx: RuntimeContext, *, workers: int, on_attempt=None, on_master=None) -> JobMaster:
    """Run ``plan`` on ``workers`` worker threads, one per subtask index (the job's parallelism);
    return the job master once the job has ended. ``on_attempt(attempt, workers)`` sees each
    attempt's workers as they start (tests use it to fail one); ``on_master(master)`` the job
    master before it starts (to send it commands)."""
    config = {**plan.config, **ctx.config, "parallelism.default": str(workers)}

    def launch(attempt: int, restore: str | None, report, workers: int) -> list[_ThreadHandle]:
        run_config = {**ctx.config, "parallelism.default": str(workers)}
        run_config.pop("execution.savepoint.path", None)
        if restore is not None:
            run_config["execution.savepoint.path"] = restore
        pool: list[Worker | None] = [None] * workers
        transport = InMemoryTransport(pool)
        for w in range(workers):
            worker_ctx = RuntimeContext(config=run_config, connectors=ctx.connectors, functions=ctx.functions,
                                        clock=ctx.clock, stdout=ctx.stdout, stderr=ctx.stderr,
                                        state_dir=ctx.state_dir, filesystems=ctx.filesystems,
                                        on_result=ctx.on_result)
            pool[w] = Worker(plan, worker_ctx, worker=w, workers=workers, transport=transport,
                             report=lambda kind, value, w=w: report(w, kind, value))
        if on_attempt is not None:
            on_attempt(attempt, pool)
        for worker in pool:
            worker.start()
        return [_ThreadHandle(worker) for worker in pool]

    master = JobMaster(launch, workers=workers, parallelism=workers, fingerprint=plan.fingerprint,
                       config=config, state_dir=str(ctx.state_dir) if ctx.state_dir is not None else None)
    if on_master is not None:
        on_master(master)
    master.run()
    return master
