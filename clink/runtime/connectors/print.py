"""The ``print`` sink: one Flink-style line per row, on the job's standard output.

A row prints as ``+I[1, 2.5, EU]``: the change kind, then the values in column order separated
by ``", "``. Nulls print as ``null``, timestamps as ISO dates with ``T`` (the fraction omitted
when it is zero), rows as ``(a, b)``, arrays as ``[a, b]`` and maps as ``{k=v}``. With
``print-identifier`` every line starts with ``<identifier>> ``.

A batch with a ``_rowkind`` string column (a changelog stream) prints that column's value in
place of ``+I`` and does not print the column itself.

Rows are printed as they arrive, so output is at-least-once: a job restarted from a checkpoint
prints again the rows that came after that checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from clink.errors import ConnectorError
from clink.runtime import compute as pc
from clink.runtime.connectors.base import Connector, OptionSpec, SinkWriter, TableSpec
from clink.runtime.connectors.text import concatenated, join_list_text

from clink.runtime.timezone import to_local

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["PRINT", "PrintWriter", "render_text"]


SINK_OPTIONS = (
    OptionSpec(name="print-identifier", description="text printed before every line, followed by '> '"),
    OptionSpec(name="standard-error", default="false", choices=("true", "false"),
               description="'true': print to standard error instead of standard output"),
)


def validate(options: Mapping[str, str], table_schema: pa.Schema, role: str) -> dict[str, str]:
    """Check the print sink's option values."""
    value = options.get("standard-error", "false").strip().lower()
    if value not in ("true", "false"):
        return {"standard-error": f"expected 'true' or 'false', found {options['standard-error']!r}"}
    return {}


def render_text(arr: pa.Array, zone: str | None = None) -> pa.Array:
    """Render every value of ``arr`` as the print sink shows it (a string array without nulls).

    A TIMESTAMP_LTZ prints as its instant in UTC (``...Z``), as Flink's print sink does; with a
    session time zone ``zone`` (the result table of ``clink run``, like Flink's SQL client) it
    prints as the wall clock it shows there.

    >>> render_text(pa.array([1.0, None, 2.5])).to_pylist()
    ['1.0', 'null', '2.5']
    """
    t = arr.type
    if pa.types.is_null(t):
        return pa.array(["null"] * len(arr), pa.string())
    if pa.types.is_floating(t):
        text = pc.cast(arr, pa.string())
        # Java prints whole doubles with ".0" and spells the special values out.
        text = pc.replace_substring_regex(text, r"^(-?[0-9]+)$", r"\1.0")
        text = pc.replace_substring(text, "nan", "NaN")
        text = pc.replace_substring(text, "inf", "Infinity")
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        text = pa.array([None if v is None else f"x'{v.hex()}'" for v in arr.to_pylist()], pa.string())
    elif pa.types.is_timestamp(t) and t.tz is not None and zone is not None:
        return render_text(to_local(arr, zone))
    elif pa.types.is_timestamp(t):
        text = pc.replace_substring(pc.cast(arr, pa.string()), " ", "T", max_replacements=1)
        text = pc.replace_substring_regex(text, r"\.0+(Z?)$", r"\1")
    elif pa.types.is_time(t):
        text = pc.replace_substring_regex(pc.cast(arr, pa.string()), r"\.0+$", "")
    elif pa.types.is_struct(t):
        parts: list[object] = ["("]
        for i, child in enumerate(arr.flatten()):
            if i:
                parts.append(", ")
            parts.append(render_text(child, zone))
        parts.append(")")
        text = pc.binary_join_element_wise(*parts, "")
    elif pa.types.is_map(t):
        def entries(values: pa.Array) -> pa.Array:
            keys, items = values.flatten()
            return pc.binary_join_element_wise(render_text(keys, zone), "=", render_text(items, zone), "")
        text = pc.binary_join_element_wise("{", join_list_text(arr, entries, ", "), "}", "")
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        items = join_list_text(arr, lambda values: render_text(values, zone), ", ")
        text = pc.binary_join_element_wise("[", items, "]", "")
    else:
        text = pc.cast(arr, pa.string())
    if arr.null_count:
        text = pc.if_else(pc.is_null(arr), "null", text)
    return text


class PrintWriter(SinkWriter):
    """Formats each batch as lines in one go, then writes them to the chosen stream."""

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        if problems := validate(spec.options, spec.table_schema, "sink"):
            raise ConnectorError(f"table {spec.name!r}: {'; '.join(problems.values())}")
        to_stderr = spec.options.get("standard-error", "false").strip().lower() == "true"
        self._stream = ctx.stderr if to_stderr else ctx.stdout
        identifier = spec.options.get("print-identifier")
        self._prefix = f"{identifier}> " if identifier else ""
        self.metrics["rows_out"] = 0
        self._updating = spec.updating

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        kind: object = "+I"
        columns = batch.columns
        if self._updating:
            kind = pc.cast(columns[-1], pa.string())
            columns = columns[:-1]
        parts: list[object] = [self._prefix, kind, "["]
        values = [render_text(c) for c in columns]
        for i, value in enumerate(values):
            if i:
                parts.append(", ")
            parts.append(value)
        parts.append("]\n")
        if not isinstance(kind, pa.Array) and not values:
            text = "".join(str(p) for p in parts) * batch.num_rows
        else:
            text = concatenated(pc.binary_join_element_wise(*parts, "")).to_pybytes().decode()
        self._stream.write(text)
        self.metrics["rows_out"] += batch.num_rows

    def close(self) -> None:
        self._stream.flush()


PRINT = Connector(
    name="print",
    description="prints every row to standard output, Flink style (+I[...], and -U, +U, -D for updates)",
    sink_options=SINK_OPTIONS,
    create_sink=PrintWriter,
    accepts_updates=True,
    validate=validate,
)
