"""A Prometheus endpoint for a running job (``'metrics.port'``, ``clink run --metrics-port``).

It serves the rows of ``Job.metrics`` as they were last published by the job's own thread (at
most a second old), so a scrape never reads an operator while it works. Needs the
``prometheus-client`` package: ``pip install 'clink[metrics]'``.
"""

from __future__ import annotations

import datetime as dt

from clink.errors import UsageError

#: (metric, column of the operators table, help, scale): counters, then gauges.
_COUNTERS = (
    ("clink_records_in", "records_in", "Rows an operator subtask took in (a source: read).", 1),
    ("clink_records_out", "records_out", "Rows an operator subtask sent on (a sink: wrote).", 1),
    ("clink_bytes_in", "bytes_in", "Bytes of Arrow buffers an operator subtask took in.", 1),
    ("clink_bytes_out", "bytes_out", "Bytes of Arrow buffers an operator subtask sent on.", 1),
    ("clink_late_records", "late_records", "Rows dropped for arriving after their window had fired.", 1),
    ("clink_skipped_records", "skipped_records", "Bad records a source skipped by its error policy.", 1),
    ("clink_busy_seconds", "busy_ms", "Time an operator subtask spent on its own work.", 1e-3),
    ("clink_backpressured_seconds", "backpressured_ms", "Time an operator subtask waited for its output to be taken.",
     1e-3),
)
_GAUGES = (
    ("clink_state_rows", "state_rows", "Rows of keyed state an operator subtask holds.", 1),
    ("clink_state_bytes", "state_bytes", "Bytes of keyed state an operator subtask holds.", 1),
    ("clink_watermark_lag_seconds", "watermark_lag_ms", "How far the subtask's watermark is behind the wall clock.",
     1e-3),
    ("clink_checkpoint_alignment_seconds", "alignment_ms",
     "How long the last checkpoint's barrier took to arrive on every input of the subtask.", 1e-3),
)
_LATENCY = (("event_time", "latency"), ("ingestion", "ingestion_latency"))


def _seconds(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return value / 1000.0


class _Collector:
    def __init__(self, metrics_of, labels: dict[str, str]) -> None:
        self._metrics_of = metrics_of
        self._labels = labels

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        metrics = self._metrics_of()
        fixed = list(self._labels)
        names = [*fixed, "operator", "kind", "subtask"]
        operators = list(metrics.operators)
        for name, column, text, scale in _COUNTERS:
            family = CounterMetricFamily(name, text, labels=names)
            for row in operators:
                family.add_metric(self._values(row), (row[column] or 0) * scale)
            yield family
        for name, column, text, scale in _GAUGES:
            family = GaugeMetricFamily(name, text, labels=names)
            for row in operators:
                if row[column] is not None:
                    family.add_metric(self._values(row), row[column] * scale)
            yield family
        family = GaugeMetricFamily("clink_watermark_seconds", "The subtask's current watermark (seconds since the "
                                   "epoch).", labels=names)
        for row in operators:
            if row["watermark"] is not None:
                family.add_metric(self._values(row), _seconds(row["watermark"]))
        yield family
        family = GaugeMetricFamily("clink_sink_latency_seconds", "Latency of the rows a sink wrote, from their event "
                                   "time or from when their source read them: quantiles over the run.",
                                   labels=[*names, "since", "quantile"])
        for row in operators:
            for since, prefix in _LATENCY:
                for quantile, suffix in (("0.5", "p50"), ("0.99", "p99")):
                    value = row.get(f"{prefix}_{suffix}_ms")
                    if value is not None:
                        family.add_metric([*self._values(row), since, quantile], value / 1000.0)
        yield family
        split_names = [*fixed, "operator", "subtask", "split"]
        lag = GaugeMetricFamily("clink_split_lag_records", "Records a source split is behind the end of what "
                                "there is to read (Kafka: the consumer lag).", labels=split_names)
        watermark = GaugeMetricFamily("clink_split_watermark_seconds", "A source split's watermark.",
                                      labels=split_names)
        for row in list(metrics.splits):
            values = [*self._labels.values(), row["operator"], str(row["subtask"]), row["split"]]
            if row["lag"] is not None:
                lag.add_metric(values, row["lag"])
            if row["watermark"] is not None:
                watermark.add_metric(values, _seconds(row["watermark"]))
        yield lag
        yield watermark
        history = list(metrics.checkpoint_history)
        yield self._one(CounterMetricFamily("clink_checkpoints", "Checkpoints completed by this run.", labels=fixed),
                        metrics.checkpoints)
        if history:
            last = history[-1]
            for name, text, value in (
                    ("clink_last_checkpoint_id", "The id of the last completed checkpoint.", last["checkpoint"]),
                    ("clink_last_checkpoint_duration_seconds", "How long the last checkpoint took.",
                     last["duration_ms"] / 1000.0),
                    ("clink_last_checkpoint_size_bytes", "The size of the last checkpoint's files.", last["size_bytes"]),
                    ("clink_last_checkpoint_alignment_seconds", "The longest barrier alignment of the last checkpoint.",
                     last["alignment_ms"] / 1000.0)):
                yield self._one(GaugeMetricFamily(name, text, labels=fixed), value)

    def _one(self, family, value):
        family.add_metric(list(self._labels.values()), value)
        return family

    def _values(self, row: dict) -> list[str]:
        return [*self._labels.values(), row["operator"], row["kind"], str(row["subtask"])]


class Endpoint:
    """An HTTP server in a daemon thread answering ``GET /metrics`` in Prometheus' text format."""

    def __init__(self, metrics_of, *, port: int, host: str = "127.0.0.1", labels: dict[str, str] | None = None):
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError as exc:
            raise UsageError("'metrics.port' serves metrics through the prometheus-client package, which is "
                             "not installed: pip install 'clink[metrics]'") from exc
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(metrics_of, labels or {}))
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise UsageError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
        self.host = host
        self.port = self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def parse_port(text: str, offset: int = 0) -> int:
    """``'metrics.port'``: a port, 0 for any free one; worker ``offset`` of a cluster job takes
    the port plus its index (0 stays any free port)."""
    try:
        port = int(text.strip())
    except ValueError:
        raise UsageError(f"'metrics.port' must be a port number, not {text!r}") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"'metrics.port' must be a port number between 0 and 65535, not {port}")
    return port + offset if port else 0
