"""The ``blackhole`` sink: accepts every row and keeps none, for benchmarks and dry runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from clink.runtime.connectors.base import Connector, SinkWriter, TableSpec

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["BLACKHOLE", "BlackholeWriter"]


class BlackholeWriter(SinkWriter):
    """Discards batches; counts their rows in ``metrics['rows_out']``."""

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        self.metrics["rows_out"] = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.metrics["rows_out"] += batch.num_rows


BLACKHOLE = Connector(
    name="blackhole",
    description="discards every row (useful to measure a pipeline without output costs)",
    create_sink=BlackholeWriter,
    accepts_updates=True,
)
