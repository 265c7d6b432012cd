"""The live view of a running job on a terminal (``clink run`` when stderr is a terminal, or
``--progress``): one line per operator with its rows per second, watermark lag, late rows,
state and busy time, and the last checkpoint. Redrawn four times a second on stderr, so the
rows a query prints on stdout are not mixed with it; gone when the job ends."""

from __future__ import annotations

import time
from collections import defaultdict

from clink.runtime.executor import Job, Metrics


def operator_summary(rows: list[dict]) -> list[dict]:
    """The operators table's rows added up over subtasks: one per operator, in plan order."""
    merged: dict[str, dict] = {}
    lags: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        op = merged.get(row["operator"])
        if op is None:
            op = merged[row["operator"]] = {
                "operator": row["operator"], "kind": row["kind"], "node": row["node"], "subtasks": 0,
                "records_in": 0, "records_out": 0, "records_in_per_s": 0.0, "records_out_per_s": 0.0,
                "late_records": 0, "state_rows": 0, "state_bytes": 0, "busy_ratio": 0.0,
                "backpressured_ratio": 0.0, "latency_p99_ms": row["latency_p99_ms"]}
        op["subtasks"] += 1
        for key in ("records_in", "records_out", "records_in_per_s", "records_out_per_s", "late_records",
                    "state_rows", "state_bytes"):
            op[key] += row[key] or 0
        # The busiest subtask says whether the operator keeps up.
        op["busy_ratio"] = max(op["busy_ratio"], row["busy_ratio"] or 0.0)
        op["backpressured_ratio"] = max(op["backpressured_ratio"], row["backpressured_ratio"] or 0.0)
        if row["watermark_lag_ms"] is not None:
            lags[row["operator"]].append(row["watermark_lag_ms"])
    for name, op in merged.items():
        op["watermark_lag_ms"] = max(lags[name]) if lags[name] else None  # the subtask furthest behind
    return sorted(merged.values(), key=lambda op: op["node"])


def _count(n: float) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _duration(ms: float | None) -> str:
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.0f} min"
    if ms < 172_800_000:
        return f"{ms / 3_600_000:.0f} h"
    return f"{ms / 86_400_000:.0f} d"


def render(metrics: Metrics, title: str = ""):
    """The view of ``metrics`` as a rich renderable."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title=title or None, title_justify="left", pad_edge=False)
    for name, justify in (("operator", "left"), ("rows in/s", "right"), ("rows out/s", "right"),
                          ("rows out", "right"), ("wm lag", "right"), ("late", "right"), ("state", "right"),
                          ("busy", "right"), ("blocked", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    for op in operator_summary(metrics.operators):
        name = op["operator"] + (f" ×{op['subtasks']}" if op["subtasks"] > 1 else "")
        table.add_row(name, _count(op["records_in_per_s"]), _count(op["records_out_per_s"]), _count(op["records_out"]),
                      _duration(op["watermark_lag_ms"]), _count(op["late_records"]) if op["late_records"] else "",
                      _count(op["state_rows"]) if op["state_rows"] else "", f"{op['busy_ratio']:.0%}",
                      f"{op['backpressured_ratio']:.0%}")
    history = metrics.checkpoint_history
    if history:
        last = history[-1]
        table.caption = (f"checkpoint {last['checkpoint']}: {_duration(last['duration_ms'])}, "
                         f"{_count(last['size_bytes'])}B; {metrics.seconds:.0f} s running")
    else:
        table.caption = f"no checkpoint yet; {metrics.seconds:.0f} s running"
    table.caption_justify = "left"
    return table


def cluster_metrics(status: dict) -> Metrics:
    """The operators, splits and checkpoints of a cluster job, from its job master's status
    (each worker's last heartbeat): the same tables as a local job's ``metrics()``."""
    metrics = Metrics()
    for _, live in sorted(status.get("workers", {}).items()):
        metrics.operators.extend(live.get("operators", ()))
        metrics.splits.extend(live.get("splits", ()))
        metrics.seconds = max(metrics.seconds, live.get("seconds", 0.0))
        for table, n in live["records_in"].items():
            metrics.records_in[table] = metrics.records_in.get(table, 0) + n
        for table, n in live["records_out"].items():
            metrics.records_out[table] = metrics.records_out.get(table, 0) + n
    metrics.operators.sort(key=lambda row: (row["node"], row["subtask"]))
    metrics.checkpoint_history = list(status.get("checkpoint_history", ()))
    metrics.checkpoints = len(metrics.checkpoint_history)
    return metrics


def run_with_view(job: Job, console, *, stop_after_checkpoints: int | None = None) -> None:
    """Run ``job`` to its end (or its stop) with the live view on ``console``."""
    from rich.live import Live

    job.observers += 1
    try:
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            last = [0.0]

            def redraw() -> None:
                now = time.perf_counter()
                if now - last[0] > 0.25:
                    job.refresh_metrics()
                    live.update(render(job.metrics, f"{job.plan.name}: {job.metrics.summary()}"))
                    last[0] = now

            job.run(stop_after_checkpoints=stop_after_checkpoints, each_round=redraw)
    finally:
        job.observers -= 1
