"""The ``values`` source: the rows of a ``VALUES`` list or of a ``SELECT`` without ``FROM``.

The compiler reads it for those queries (it is internal, like ``collect``): it gives the row
numbers ``0 .. 'rows' - 1`` in one batch, in one subtask, and ends; the plan computes each
row's values from its number. A checkpoint records whether the batch was given out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime.connectors.base import Connector, OptionSpec, SourceReader, TableSpec

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["VALUES", "ValuesReader"]


class ValuesReader(SourceReader):
    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        self._rows = int(spec.options.get("rows", "1"))
        self._schema = spec.schema
        self.metrics["records_in"] = 0
        self.finished = self._rows == 0

    def poll(self) -> pa.RecordBatch | None:
        if self.finished:
            return None
        self.finished = True
        self.metrics["records_in"] = self._rows
        rows = pa.record_batch([pa.array(np.arange(self._rows, dtype=np.int64))], names=["_row"])
        return rows.select(self._schema.names)

    def position(self) -> dict:
        return {"given": self.finished}

    def seek(self, position: dict) -> None:
        self.finished = bool(position.get("given")) or self._rows == 0


def _validate(options: Mapping[str, str], schema: pa.Schema, role: str) -> dict[str, str]:
    rows = options.get("rows", "1")
    if not rows.isdigit():
        return {"rows": f"'rows' must be a whole number of rows, not {rows!r}"}
    return {}


VALUES = Connector(
    name="values",
    description="the rows of a VALUES list or a SELECT without FROM, by number (internal)",
    source_options=(OptionSpec(name="rows", default="1", description="how many rows"),),
    create_source=ValuesReader,
    validate=_validate,
)
