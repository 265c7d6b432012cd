"""The ``collect`` sink: rows of a bare ``SELECT`` go back to whoever runs the job."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from clink.errors import CompilerBug
from clink.runtime.connectors.base import Connector, SinkWriter, TableSpec

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext


class CollectWriter(SinkWriter):
    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        if ctx.on_result is None:
            raise CompilerBug("a query's results have nowhere to go: RuntimeContext.on_result is not set")
        self._name = spec.name
        self._deliver = ctx.on_result

    def write(self, batch: pa.RecordBatch) -> None:
        self.metrics["rows_out"] = self.metrics.get("rows_out", 0) + batch.num_rows
        self._deliver(self._name, batch)


COLLECT = Connector(
    name="collect",
    description="rows of a bare SELECT, handed back to the caller (internal)",
    create_sink=CollectWriter,
    accepts_updates=True,
)
