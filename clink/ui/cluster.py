"""A job on Ray as the dashboard sees a local one: its plan (from the artefact its job master
runs) and its metrics, made from the job master's status (each worker's last heartbeat) by a
thread that asks for it every second while the dashboard is open."""

from __future__ import annotations

import threading

from clink.errors import PipelineError
from clink.live import cluster_metrics
from clink.runtime.executor import Metrics, stable_ids

#: What the job master's state says about the run, as the dashboard's states.
_ENDED = {"finished", "stopped", "failed"}


class ClusterJobView:
    """``plan``, ``metrics``, ``finished``, ``observers`` and ``refresh_metrics`` of a ``RayJob``."""

    def __init__(self, ray_job, plan, *, interval: float = 1.0) -> None:
        self.plan = plan
        self.uids = stable_ids(plan)
        self.metrics = Metrics()
        self.observers = 0
        self.finished = False
        self._failed = False
        self._error: BaseException | None = None
        self._ray_job = ray_job
        self._interval = interval
        self._closed = threading.Event()
        self.refresh_metrics()
        self._poller = threading.Thread(target=self._poll, name="clink dashboard status", daemon=True)
        self._poller.start()

    def refresh_metrics(self) -> None:
        try:
            status = self._ray_job.status()
        except Exception:  # noqa: BLE001 - the job master is gone: the last status stands
            return
        if not status:
            return
        metrics = cluster_metrics(status)
        metrics.stopped_at = status.get("stopped_at")
        metrics.restored_from = None
        self.metrics = metrics
        state = status.get("state")
        self.finished = state in _ENDED
        if state == "failed":
            self._failed = True
            failures = status.get("failures") or ["the job failed"]
            self._error = PipelineError(f"on Ray: {failures[-1]}")

    def close(self) -> None:
        self._closed.set()

    def _poll(self) -> None:
        while not self._closed.wait(self._interval):
            self.refresh_metrics()
            if self.finished:
                return


def serve_cluster_job(ray_job, plan, *, sql: dict[str, str], name: str | None = None, host: str = "127.0.0.1",
                      port: int = 0, token: str | None = None):
    """The dashboard of a job on Ray; closing it stops asking the job master too."""
    from clink.ui.server import Dashboard

    view = ClusterJobView(ray_job, plan)
    board = Dashboard(view, sql=sql, name=name, host=host, port=port, token=token)
    board.on_close = view.close
    return board
