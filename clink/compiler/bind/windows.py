"""Windows: the window table functions (TUMBLE, HOP, CUMULATE, SESSION in FROM), group windows
(``GROUP BY TUMBLE(ts, ...)``), and where late rows go and how late they may be."""

from __future__ import annotations

import pyarrow.types as pt

from clink import records
from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.bind.relations import is_proctime
from clink.compiler.bind.scope import Scope, ScopeColumn, describe, did_you_mean, updating_reason
from clink.compiler.catalog import CatalogTable
from clink.errors import SqlError
from clink.runtime.settings import parse_duration

#: Flink's names of each window table function's parameters, in their order.
_TVF_PARAMS = {
    "TUMBLE": ("DATA", "TIMECOL", "SIZE", "OFFSET"),
    "HOP": ("DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"),
    "CUMULATE": ("DATA", "TIMECOL", "STEP", "SIZE", "OFFSET"),
    "SESSION": ("DATA", "TIMECOL", "GAP"),
}


class WindowBinder:
    """Window table functions, group windows, late rows."""

    def _window_tvf(self, call: ast.FunctionCall, alias: str | None) -> tuple[ir.Rel, Scope]:
        """``TUMBLE(TABLE t, DESCRIPTOR(ts), size [, offset])``, ``HOP(..., slide, size [, offset])``,
        ``CUMULATE(..., step, max_size [, offset])``, ``SESSION(TABLE t [PARTITION BY k], ..., gap)``."""
        name = call.name
        usage = {
            "TUMBLE": "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND [, offset])",
            "HOP": "HOP(TABLE t, DESCRIPTOR(ts), slide, size [, offset])",
            "CUMULATE": "CUMULATE(TABLE t, DESCRIPTOR(ts), step, max_size [, offset])",
            "SESSION": "SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(ts), gap)",
        }[name]
        args = self._tvf_arguments(call, usage)
        wanted = {"TUMBLE": (3, 4), "HOP": (4, 5), "CUMULATE": (4, 5), "SESSION": (3, 3)}[name]
        if not wanted[0] <= len(args) <= wanted[1]:
            raise SqlError(f"{name} takes {wanted[0]}{'' if wanted[0] == wanted[1] else f' or {wanted[1]}'} "
                           f"arguments, got {len(args)}", call.span, f"write {usage}")
        table_arg, descriptor, *lengths = args
        offset = lengths.pop() if len(args) == wanted[1] and name != "SESSION" else None
        if not isinstance(table_arg, ast.TableArg):
            raise SqlError(f"the first argument of {name} must be TABLE <name>", table_arg.span, f"write {usage}")
        if not isinstance(descriptor, ast.Descriptor) or len(descriptor.names) != 1:
            raise SqlError(f"the second argument of {name} must be DESCRIPTOR(<time column>)", descriptor.span,
                           f"write {usage}")
        if table_arg.partition_by and name != "SESSION":
            raise SqlError(f"PARTITION BY applies to SESSION windows only, not {name}", table_arg.span)
        rel, scope = self.from_item(ast.TableRef(name=table_arg.name, alias=alias, span=table_arg.span))
        if ir.is_updating(rel):
            producer = ir.updating_source(rel)
            raise SqlError(f"{name} windows over an updating table are not supported", table_arg.span,
                           f"the table produces updates: {updating_reason(producer, producer.span)}; aggregate it "
                           "with a GROUP BY without a window")
        time_name = descriptor.names[0]
        matches = [i for i, c in enumerate(scope.columns) if c.name == time_name]
        if not matches:
            raise SqlError(f"unknown column {time_name!r} in {table_arg.name!r}", descriptor.span,
                           did_you_mean(time_name, [c.name for c in scope.columns], "columns"))
        time = matches[0]
        if not scope.columns[time].rowtime:
            entry = self.catalog.lookup(table_arg.name)
            declared = isinstance(entry, CatalogTable) and entry.info.watermark is not None
            raise SqlError(
                f"column {time_name!r} of {table_arg.name!r} is not an event-time attribute", descriptor.span,
                (f"windows run on the watermark column of the table ({entry.info.watermark[0]!r})" if declared else
                 f"{table_arg.name!r} has no event time: declare WATERMARK FOR {time_name} AS "
                 f"{time_name} - INTERVAL '5' SECOND in its CREATE TABLE"))
        ms = [self._window_length(name, a) for a in lengths]
        shift = self._window_offset(name, offset) if offset is not None else 0
        match name:
            case "TUMBLE":
                window = ir.WindowDef("tumble", size=ms[0], offset=shift)
            case "HOP":
                window = ir.WindowDef("hop", slide=ms[0], size=ms[1], offset=shift)
                if window.size % window.slide:
                    raise SqlError("a HOP window's size must be a whole multiple of its slide", call.span)
            case "CUMULATE":
                window = ir.WindowDef("cumulate", slide=ms[0], size=ms[1], offset=shift)
                if window.size % window.slide:
                    raise SqlError("a CUMULATE window's max size must be a whole multiple of its step", call.span)
            case _:
                window = ir.WindowDef("session", gap=ms[0])
        partition = []
        for key in table_arg.partition_by:
            found = [i for i, c in enumerate(scope.columns) if c.name == key]
            if not found:
                raise SqlError(f"unknown column {key!r} in PARTITION BY", table_arg.span,
                               did_you_mean(key, [c.name for c in scope.columns], "columns"))
            partition.append(found[0])
        tvf = ir.WindowTVF(input=rel, window=window, time=time, partition_by=tuple(partition), span=call.span,
                           uid=self._uid if window.kind == "session" else None)
        columns = tuple(records.evolve(c, rowtime=False) for c in scope.columns)
        columns += tuple(ScopeColumn(alias, f.name, f, f.name == "window_time")
                         for f in tvf.schema.fields[len(scope.columns):])
        return tvf, Scope(columns)

    def _tvf_arguments(self, call: ast.FunctionCall, usage: str) -> list[ast.Expr]:
        """The arguments of a window table function in their order, from arguments given in
        order, by name (``SIZE => INTERVAL '10' MINUTES``, as Flink names them), or both (those
        in order first)."""
        params = _TVF_PARAMS[call.name]
        given: list[ast.Expr | None] = []
        named = False
        for arg in call.args:
            if not isinstance(arg, ast.NamedArg):
                if named:
                    raise SqlError("an argument in order cannot follow one given by name", arg.span, f"write {usage}")
                given.append(arg)
                continue
            named = True
            if arg.name not in params:
                raise SqlError(f"{call.name} has no parameter {arg.name}", arg.span,
                               f"its parameters: {', '.join(params)}")
            at = params.index(arg.name)
            given.extend([None] * (at + 1 - len(given)))
            if given[at] is not None:
                raise SqlError(f"{call.name}'s {arg.name} is given twice", arg.span)
            given[at] = arg.value
        if not named:
            return given
        missing = [p for p, a in zip(params, given, strict=False) if a is None]
        missing += [p for p in params[len(given):] if p != "OFFSET"]
        if missing:
            raise SqlError(f"{call.name} needs its {', '.join(missing)}", call.span, f"write {usage}")
        return [a for a in given if a is not None]

    def _window_offset(self, function: str, arg: ast.Expr) -> int:
        """A window's offset: any interval, negative too (-16 minutes shifts ten-minute windows
        as +4 minutes do)."""
        value = self._expr(arg, Scope(()))
        if not (isinstance(value, ir.Literal) and pt.is_duration(value.type)):
            raise SqlError(f"the offset of {function} is an interval literal, like INTERVAL '1' MINUTE", arg.span)
        return value.value

    def _window_length(self, function: str, arg: ast.Expr) -> int:
        value = self._expr(arg, Scope(()))
        if not (isinstance(value, ir.Literal) and pt.is_duration(value.type)):
            raise SqlError(f"{function} takes interval literals for its lengths, like INTERVAL '10' SECOND",
                           arg.span)
        if value.value <= 0:
            raise SqlError(f"a {function} window length must be positive, got {value.value} ms", arg.span)
        return value.value

    def _legacy_window(self, call: ast.FunctionCall, scope: Scope,
                       rel: ir.Rel) -> tuple[ir.WindowDef, int, bool]:
        """``GROUP BY TUMBLE(ts, size)``, ``HOP(ts, slide, size)``, ``SESSION(ts, gap)``; ``ts``
        an event-time column, or a processing-time one (``PROCTIME()``, the last value: True)."""
        wanted = {"TUMBLE": 2, "HOP": 3, "SESSION": 2, "CUMULATE": 3}[call.name]
        if len(call.args) != wanted:
            raise SqlError(f"{call.name} in GROUP BY takes {wanted} arguments, got {len(call.args)}", call.span)
        time = self._expr(call.args[0], scope)
        proctime = isinstance(time, ir.Column) and is_proctime(rel, time.index)
        if proctime and call.name != "TUMBLE":
            raise SqlError(f"{call.name} windows over processing time are not supported yet; TUMBLE is",
                           call.args[0].span)
        if not isinstance(time, ir.Column) or not (scope.columns[time.index].rowtime or proctime):
            raise SqlError(f"the first argument of {call.name} must be an event-time column "
                           "(the table's WATERMARK column) or a processing-time one (PROCTIME())", call.args[0].span)
        ms = [self._window_length(call.name, a) for a in call.args[1:]]
        match call.name:
            case "TUMBLE":
                window = ir.WindowDef("tumble", size=ms[0])
            case "HOP":
                window = ir.WindowDef("hop", slide=ms[0], size=ms[1])
                if window.size % window.slide:
                    raise SqlError("a HOP window's size must be a whole multiple of its slide", call.span)
            case "CUMULATE":
                window = ir.WindowDef("cumulate", slide=ms[0], size=ms[1])
            case _:
                window = ir.WindowDef("session", gap=ms[0])
        return window, time.index, proctime

    def _check_session_keys(self, rel: ir.Rel, keys: list[ir.Expr], q: ast.Select) -> None:
        # Sessions are kept per group key; Flink's SESSION(TABLE t PARTITION BY k, ...) means the same
        # when the partition keys are the grouping keys.
        if not isinstance(rel, ir.WindowTVF):
            return
        key_columns = {k.index for k in keys if isinstance(k, ir.Column)}
        if set(rel.partition_by) != key_columns or len(key_columns) != len(keys):
            raise SqlError("a SESSION window needs PARTITION BY the same columns the query groups by",
                           q.from_.span, "write SESSION(TABLE t PARTITION BY k, ...) ... GROUP BY window_start, "
                                         "window_end, k")

    def _late_output(self, q: ast.Select, below: ir.Rel) -> ir.Sink | None:
        """With SET 'table.exec.late-events' = 'side-output', the sink late rows go to: the table
        named by 'table.exec.late-events.table', whose columns match the rows the window or OVER
        aggregation reads."""
        mode = self.config.get("table.exec.late-events", "drop").lower()
        if mode == "drop":
            return None
        if mode != "side-output":
            raise SqlError(f"'table.exec.late-events' must be 'drop' or 'side-output', got {mode!r}", q.span)
        name = self.config.get("table.exec.late-events.table")
        if not name:
            raise SqlError("'table.exec.late-events' = 'side-output' needs 'table.exec.late-events.table', "
                           "the table late rows go to", q.span)
        target = self.catalog.tables.get(name)
        if target is None:
            raise SqlError(f"unknown table {name!r} in 'table.exec.late-events.table'", q.span,
                           did_you_mean(name, sorted(self.catalog.tables), "tables"))
        connector = self.connectors.get(target.info.connector)
        if connector is None or connector.create_sink is None:
            raise SqlError(f"late rows cannot be written to {name!r}: its connector cannot be written", q.span)
        got, want = below.schema, target.info.columns
        if len(got) != len(want) or not all(T.assignable(a.type, b.type)
                                            for a, b in zip(got.fields, want.fields, strict=True)):
            raise SqlError(f"late rows have the columns ({describe(got)}), but {name!r} has ({describe(want)})",
                           q.span, "declare the late-events table with the same columns as the rows "
                                   "the window or OVER aggregation reads")
        return ir.Sink(input=below, name=name, connector=target.info.connector, options=target.info.options,
                       target=want, span=q.span)

    def _allowed_lateness(self, q: ast.Select) -> int:
        text = self.config.get("table.exec.allowed-lateness")
        if text is None:
            return 0
        return parse_duration(text)  # checked when SET
