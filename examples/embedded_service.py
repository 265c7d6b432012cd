"""A tiny HTTP service with a clink pipeline inside it: bids go in, counts per window come out.

    python examples/embedded_service.py              # prints the address it listens on
    curl -X POST http://127.0.0.1:PORT/bid -d '{"auction": 7, "price": 12, "ts": "2024-01-01 00:00:03"}'
    curl http://127.0.0.1:PORT/totals

``POST /bid`` takes one JSON object, or a list of them, and pushes it into the table ``bids``
(a ``push`` table). ``GET /totals`` returns, for every 10-second window of event time that has
closed, the number of bids and the highest price per auction. A window closes when the
watermark (the latest bid time seen, minus one second) passes its end, so a window's row appears
once a bid at least one second after the window's end has arrived.

The pipeline runs in a background thread of this process (``plan.start(background=True)``);
request handlers push and poll from their own threads. docs/embedding.md explains the API.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import clink

SQL = """\
CREATE TABLE bids (
  auction BIGINT NOT NULL,
  price   BIGINT,
  ts      TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH ('connector' = 'push');

SELECT auction, window_start, window_end, COUNT(*) AS bids, MAX(price) AS top_price
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, auction;
"""


def json_rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """The rows of ``batch`` as JSON-ready dicts; timestamps become ISO text."""
    columns = [pc.strftime(c, "%Y-%m-%dT%H:%M:%S") if pa.types.is_timestamp(c.type) else c
               for c in batch.columns]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names).to_pylist()


class BidService:
    """The pipeline and the HTTP server around it. ``port=0`` picks a free port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.job = clink.compile(SQL, name="embedded_service.sql").start(background=True)
        self._totals: list[dict[str, Any]] = []
        self._totals_lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), _Handler)
        self.server.service = self  # type: ignore[attr-defined] - read by the handler
        self._serving: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def push_bids(self, events: list[dict[str, Any]]) -> int:
        return self.job.push("bids", events)

    def totals(self) -> list[dict[str, Any]]:
        """Every window that has closed so far, by window and auction."""
        # Let the pipeline take in every bid pushed so far, so a client reads its own writes.
        self.job.run_until_idle()
        with self._totals_lock:
            while (batch := self.job.poll()) is not None:
                self._totals.extend(json_rows(batch))
            return sorted(self._totals, key=lambda r: (r["window_start"], r["auction"]))

    def start(self) -> BidService:
        """Serve requests in a background thread."""
        self._serving = threading.Thread(target=self.server.serve_forever, name="bid service", daemon=True)
        self._serving.start()
        return self

    def close(self) -> None:
        """Stop serving, then stop the pipeline."""
        if self._serving is not None:
            self.server.shutdown()
            self._serving.join()
        self.server.server_close()
        self.job.stop(with_checkpoint=False)


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def do_POST(self) -> None:
        if self.path != "/bid":
            return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: POST {self.path}"})
        try:
            event = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        except json.JSONDecodeError as exc:
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": f"the body is not JSON: {exc}"})
        events = event if isinstance(event, list) else [event]
        if not all(isinstance(e, dict) for e in events):
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": "send a JSON object per bid"})
        try:
            pushed = self.server.service.push_bids(events)  # type: ignore[attr-defined]
        except clink.UsageError as exc:  # a bid that does not fit the table
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except clink.ClinkError as exc:  # the pipeline failed
            return self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})
        return self._reply(HTTPStatus.OK, {"pushed": pushed})

    def do_GET(self) -> None:
        if self.path != "/totals":
            return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: GET {self.path}"})
        try:
            totals = self.server.service.totals()  # type: ignore[attr-defined]
        except clink.ClinkError as exc:
            return self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})
        return self._reply(HTTPStatus.OK, {"totals": totals})

    def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: one line per request would drown the example's own output


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    args = parser.parse_args(argv)
    service = BidService(args.host, args.port)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the service as Ctrl-C does
    print(f"listening on {service.url}  (POST /bid, GET /totals; Ctrl-C stops)", flush=True)
    try:
        service.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
