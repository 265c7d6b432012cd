"""An HTTP server in a daemon thread that shows one job: its graph, metrics and SQL.

It never calls into the job. The job's own thread republishes ``job.metrics`` every second
while ``job.observers`` is above 0 (the server counts as one); a publisher thread here reads
those rows, folds the subtasks of each operator together and hands the snapshot to every open
``/events`` stream. The plan, read once at start, is immutable.

Routes (all ``GET``):

======================  =====================================================================
``/``                   the page (``static/index.html``; its script and style beside it)
``/api/plan``           nodes, edges, depth of each node, the SQL text, each node's SQL line
``/api/metrics``        the latest snapshot
``/events``             server-sent events: one snapshot (``data: {json}``) per second
======================  =====================================================================

Bound to a loopback address it answers only requests whose ``Host`` names a loopback address
(a web page elsewhere cannot reach it through DNS rebinding). Bound to anything else it
requires a token: ``?token=...`` (the page then keeps it in a cookie), an
``Authorization: Bearer`` header or the cookie; a request without it gets 401.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from clink.errors import ClinkError, UsageError

STATIC = Path(__file__).parent / "static"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}
_COOKIE = "clink_ui_token"

#: Columns summed over an operator's subtasks; the others take the largest (ratios, lag, latency)
#: or, for the watermark, the smallest (an operator's watermark is its slowest subtask's).
_SUMMED = ("records_in", "records_out", "bytes_in", "bytes_out", "records_in_per_s", "records_out_per_s",
           "late_records", "skipped_records", "state_rows", "state_bytes", "busy_ms", "backpressured_ms")
_LARGEST = ("watermark_lag_ms", "busy_ratio", "backpressured_ratio", "alignment_ms", "latency_p50_ms",
            "latency_p99_ms", "ingestion_latency_p50_ms", "ingestion_latency_p99_ms")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def operator_name(node, uids: Mapping[int, str]) -> str:
    """The name a node's rows carry in ``job.metrics.operators`` (``Job.operator_rows``)."""
    return uids.get(node.id) or f"{kind_name(node)}-{node.id}"


def kind_name(node) -> str:
    from clink.runtime.operators import kind_of
    from clink.runtime.plan import Sink, Source

    if isinstance(node, Source):
        return "source"
    if isinstance(node, Sink):
        return "sink"
    kind = kind_of(node)
    return kind.name if kind is not None else type(node).__name__.lower()


def plan_description(plan, sources: Mapping[str, str]) -> dict:
    """What ``/api/plan`` answers: every node with its depth (the longest path from a source),
    the edges, and for a node whose span lies in one of ``sources`` its file and line."""
    from clink.runtime.executor import stable_ids

    uids = stable_ids(plan)
    depth: dict[int, int] = {}
    for node in plan.nodes:  # plan order is topological: inputs come first
        depth[node.id] = 1 + max((depth.get(i, 0) for i in node.inputs), default=-1)
    nodes, edges = [], []
    for node in plan.nodes:
        file, line, col = _place(node.span)
        label = _label(node)
        nodes.append({"id": node.id, "operator": operator_name(node, uids), "kind": kind_name(node),
                      "label": label, "span": node.span, "file": file if file in sources else None,
                      "line": line if file in sources else None, "col": col, "depth": depth[node.id],
                      "inputs": list(node.inputs)})
        edges.extend({"from": i, "to": node.id} for i in node.inputs)
    return {"name": plan.name, "nodes": nodes, "edges": edges,
            "sources": [{"name": name, "text": text} for name, text in sources.items()]}


def _label(node) -> str:
    """What a box says under the operator's name: the table, what a chain or a stateful operator
    computes, or how an exchange spreads the rows (``hash(auction)``)."""
    from clink.runtime.plan import Exchange

    if isinstance(node, Exchange):
        spread = node.distribution
        if spread.kind == "hash":
            return f"hash({', '.join(node.schema.names[k] for k in spread.keys)})"
        return spread.kind
    # A stateful operator: what its state means (``GROUP BY (auction) computing COUNT(*)``).
    return getattr(node, "table", None) or getattr(node, "description", "") or node.meaning or ""


def _place(span: str) -> tuple[str | None, int | None, int | None]:
    """``file:line:col`` (perhaps followed by the SQL text) as its three parts."""
    if not span:
        return None, None, None
    head = span.split()[0]
    file, _, col = head.rpartition(":")
    file, _, line = file.rpartition(":")
    try:
        return file, int(line), int(col)
    except ValueError:
        return None, None, None


def fold_subtasks(rows: list[dict]) -> list[dict]:
    """One row per operator out of one per operator and subtask, in the order the rows came."""
    out: dict[str, dict] = {}
    for row in rows:
        total = out.get(row["operator"])
        if total is None:
            total = out[row["operator"]] = {**row, "subtasks": 1}
            continue
        total["subtasks"] += 1
        for column in _SUMMED:
            total[column] = (total[column] or 0) + (row[column] or 0)
        for column in _LARGEST:
            values = [v for v in (total[column], row[column]) if v is not None]
            total[column] = max(values) if values else None
        marks = [v for v in (total["watermark"], row["watermark"]) if v is not None]
        total["watermark"] = min(marks) if marks else None
    return list(out.values())


def _plain(value):
    """JSON for what metrics rows hold: timestamps as milliseconds since the epoch."""
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    return str(value)


def error_description(exc: BaseException, sources: Mapping[str, str]) -> dict:
    """A failure as the page shows it: the message, where in the SQL (``file:line:col``) and
    the text ``clink run`` prints (with the SQL line and a caret)."""
    if isinstance(exc, ClinkError):
        span = getattr(exc, "span", None)
        return {"message": str(getattr(exc, "message", None) or exc), "position": str(span) if span else None,
                "text": exc.render(dict(sources))}
    return {"message": f"internal error: {type(exc).__name__}: {exc}", "position": None,
            "text": f"error: internal error: {type(exc).__name__}: {exc}"}


class Dashboard:
    """The running server of one job: ``url`` to open, ``close()`` to stop it.

    ``job`` is a ``clink.runtime.executor.Job`` or what ``Plan.start()`` returns. ``sql`` is the
    pipeline's text (named ``name``, as the plan's spans name it) or a mapping of file names to
    texts (a pipeline and its init scripts).
    """

    def __init__(self, job, *, sql: str | Mapping[str, str] | None = None, name: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, token: str | None = None, interval: float = 1.0) -> None:
        from clink.runtime.executor import Job

        self._outer = job
        self._job = getattr(job, "_job", job)  # an EmbeddedJob wraps the runtime Job
        # A runtime Job, or what stands for one (a job on Ray: clink.ui.cluster.ClusterJobView).
        looks_like_job = all(hasattr(self._job, a) for a in ("plan", "metrics", "observers", "refresh_metrics"))
        if not (isinstance(self._job, Job) or looks_like_job):
            raise UsageError(f"the dashboard shows a job that runs in this process, not {type(job).__name__}: "
                             "a job on Ray is shown by clink jobs JOB --ui (or clink run --target ray --ui)")
        plan = self._job.plan
        if isinstance(sql, Mapping):
            self._sources = dict(sql)
        else:
            self._sources = {name or plan.name: sql} if sql else {}
        self._plan = plan_description(plan, self._sources)
        self._interval = interval
        self.host = host
        if is_loopback(host):
            self.token = token
        else:
            self.token = token or os.environ.get("CLINK_UI_TOKEN") or secrets.token_urlsafe(24)
        self._error: dict | None = None
        #: Called once the server has stopped (what a view of a job elsewhere stops with it).
        self.on_close = None
        self._snapshot: dict = {}
        self._seq = 0
        self._closing = False
        self._changed = threading.Condition()
        try:
            server_class = _Server6 if ":" in host else ThreadingHTTPServer
            self._server = server_class((host.strip("[]"), port), _handler_for(self))
        except OSError as exc:
            raise UsageError(f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}") from None
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._job.observers += 1
        # Rows for the first snapshot, from this (the starting) thread: later ones come from the
        # job's own thread. A job of Plan.start() may already run in its thread: under its lock.
        if callable(getattr(job, "metrics", None)):
            job.metrics()
        else:
            self._job.refresh_metrics()
        self._publish()
        self._publisher = threading.Thread(target=self._publish_loop, name="clink dashboard", daemon=True)
        self._serving = threading.Thread(target=self._server.serve_forever, name="clink dashboard http",
                                         daemon=True)
        self._publisher.start()
        self._serving.start()

    @property
    def url(self) -> str:
        # Bound to every address, the page is opened on this machine's loopback one.
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host.strip("[]"), self.host.strip("[]"))
        host = f"[{host}]" if ":" in host else host
        query = f"?token={urllib.parse.quote(self.token)}" if self.token else ""
        return f"http://{host}:{self.port}/{query}"

    @property
    def finished(self) -> bool:
        """Whether the job has ended (finished, stopped or failed)."""
        return bool(self._job.finished)

    def fail(self, exc: BaseException) -> None:
        """Show ``exc`` as the job's error. ``clink run`` calls it from the thread that ran the
        job, once the run has raised: the job's counters are brought up to date first, as far as
        they still can be, so the page shows how far it got."""
        self._error = error_description(exc, self._sources)
        try:
            self._job.refresh_metrics()
        except Exception:  # noqa: BLE001 - the failure to show is the one given, not this one
            pass
        self._publish()

    def close(self) -> None:
        """Send the final snapshot to every open event stream, then stop serving."""
        if self._closing:
            return
        self._publish()
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._job.observers -= 1
        if self.on_close is not None:
            self.on_close()

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- snapshots

    def _state(self) -> str:
        outer_error = getattr(self._outer, "_error", None)
        if self._error is None and outer_error is not None:
            self._error = error_description(outer_error, self._sources)
        if self._error is not None or getattr(self._job, "_failed", False):
            return "failed"
        if self._job.metrics.stopped_at is not None:
            return "stopped"
        return "finished" if self._job.finished else "running"

    def _publish(self) -> None:
        metrics = self._job.metrics
        state = self._state()
        rows = list(metrics.operators)
        snapshot = {
            "time": int(time.time() * 1000), "state": state, "error": self._error,
            "seconds": metrics.seconds, "checkpoints": metrics.checkpoints,
            "restored_from": metrics.restored_from, "operators": fold_subtasks(rows), "subtasks": rows,
            "splits": list(metrics.splits), "checkpoint_history": list(metrics.checkpoint_history),
        }
        with self._changed:
            self._seq += 1
            snapshot["seq"] = self._seq
            self._snapshot = snapshot
            self._changed.notify_all()

    def _publish_loop(self) -> None:
        while not self._closing:
            time.sleep(self._interval)
            if not self._closing:
                self._publish()

    def snapshot(self) -> dict:
        """The latest snapshot (what ``/api/metrics`` answers)."""
        with self._changed:
            return self._snapshot

    def plan(self) -> dict:
        return self._plan

    def _next(self, after: int) -> dict | None:
        """The first snapshot newer than ``after``, waiting for it; None once closed."""
        with self._changed:
            while self._seq <= after and not self._closing:
                self._changed.wait(self._interval * 2)
            if self._seq <= after:
                return None
            return self._snapshot


def serve(job, *, sql: str | Mapping[str, str] | None = None, name: str | None = None, host: str = "127.0.0.1",
          port: int = 0, token: str | None = None) -> Dashboard:
    """Serve the dashboard of ``job`` (a ``Plan.start()`` job, or a runtime ``Job``) on ``host:port``
    (port 0: any free one) until ``close()``. Bound to anything but a loopback address, every
    request needs ``token`` (default: ``CLINK_UI_TOKEN``, else a random one, in ``.url``)."""
    return Dashboard(job, sql=sql, name=name, host=host, port=port, token=token)


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler_for(dashboard: Dashboard) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        board = dashboard

    return Handler


class _Handler(BaseHTTPRequestHandler):
    board: Dashboard
    server_version = "clink-dashboard"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass  # the job's output stays readable; the page shows what a log line would

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        url = urllib.parse.urlsplit(self.path)
        if not self._allowed(url):
            return
        path = url.path
        if path == "/events":
            self._events()
        elif path == "/api/plan":
            self._json(self.board.plan())
        elif path == "/api/metrics":
            self._json(self.board.snapshot())
        elif path == "/":
            self._static("index.html", url)
        elif path.startswith("/static/") and path.count("/") == 2:
            self._static(path.rsplit("/", 1)[1], url)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _allowed(self, url: urllib.parse.SplitResult) -> bool:
        board = self.board
        if board.token is None:
            host = (self.headers.get("Host") or "").rpartition(":")[0] or self.headers.get("Host") or ""
            if not is_loopback(host):
                self._send(403, b"the dashboard answers requests to a loopback address only\n",
                           "text/plain; charset=utf-8")
                return False
            return True
        given = urllib.parse.parse_qs(url.query).get("token", [""])[0]
        if not given:
            auth = self.headers.get("Authorization") or ""
            given = auth[7:] if auth.startswith("Bearer ") else ""
        if not given:
            for part in (self.headers.get("Cookie") or "").split(";"):
                key, _, value = part.strip().partition("=")
                if key == _COOKIE:
                    given = urllib.parse.unquote(value)
        if not hmac.compare_digest(given.encode(), board.token.encode()):
            self._send(401, b"a token is required: open the URL clink printed (with ?token=...)\n",
                       "text/plain; charset=utf-8", extra={"WWW-Authenticate": "Bearer"})
            return False
        return True

    def _send(self, status: int, body: bytes, content_type: str, *, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, value: object) -> None:
        self._send(200, json.dumps(value, default=_plain).encode(), "application/json")

    def _static(self, name: str, url: urllib.parse.SplitResult) -> None:
        file = STATIC / name
        if file.suffix not in _TYPES or not file.is_file():
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        extra = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:"}
        if name == "index.html" and self.board.token is not None:
            # The page's script, style and requests carry the token in a cookie of this origin.
            extra["Set-Cookie"] = f"{_COOKIE}={urllib.parse.quote(self.board.token)}; HttpOnly; SameSite=Strict; Path=/"
        self._send(200, file.read_bytes(), _TYPES[file.suffix], extra=extra)

    def _events(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.close_connection = True
        seq = 0
        snapshot = self.board.snapshot()
        try:
            while snapshot is not None:
                seq = snapshot["seq"]
                self.wfile.write(b"data: " + json.dumps(snapshot, default=_plain).encode() + b"\n\n")
                self.wfile.flush()
                snapshot = self.board._next(seq)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page was closed
