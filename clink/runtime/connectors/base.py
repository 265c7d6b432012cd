"""The connector contract: option specs, source readers, sink writers, and the registry.

A connector is registered by name in a ``ConnectorRegistry`` that travels in the
``RuntimeContext``. The compiler reads the option specs to check a table's ``WITH`` options
before anything runs; the runtime asks the connector for readers and writers.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from clink.records import field, record
from clink.runtime.registry import ConnectorRegistry

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext
    from clink.runtime.plan import ChangelogMode

__all__ = [
    "Connector",
    "ConnectorRegistry",
    "OptionSpec",
    "SinkWriter",
    "SourceReader",
    "TableSpec",
    "widen_struct",
]


@record(kw_only=True)
class OptionSpec:
    """One ``WITH`` option a connector accepts.

    ``name`` may contain ``#`` where a column name goes (``fields.#.kind``). ``choices``, when
    set, lists the accepted values (compared case-insensitively).
    """

    name: str
    description: str
    default: str | None = None
    required: bool = False
    choices: tuple[str, ...] | None = None

    def matches(self, key: str, columns: Iterable[str]) -> bool:
        if "#" not in self.name:
            return key == self.name
        return any(key == self.name.replace("#", c) for c in columns) or fnmatch.fnmatchcase(
            key, self.name.replace("#", "*")
        )


@record(kw_only=True)
class TableSpec:
    """What a connector is given to read or write one table.

    ``schema``: the columns to produce (a source) or that arrive (a sink), in order.
    ``table_schema``: all physical columns of the table as declared (CSV matches by position).
    ``predicate``: an optional ``pyarrow.compute.Expression``; a source may drop rows for which
    it is not true, and need not.
    """

    name: str
    schema: pa.Schema
    table_schema: pa.Schema
    options: Mapping[str, str] = field(factory=dict)
    predicate: Any = None
    #: The row kinds that arrive (a sink) or that the reader must produce (a changelog source):
    #: an updating stream's batches end with the row-kind column
    #: (``clink.runtime.plan.ROWKIND_COLUMN``). None: append-only.
    changelog: ChangelogMode | None = None
    #: A source read by several subtasks: this reader's share is that of subtask ``subtask``
    #: (0-based) of ``parallelism`` (only for a connector that is ``splittable``).
    subtask: int = 0
    parallelism: int = 1
    #: The table's ``PRIMARY KEY (...) NOT ENFORCED`` columns, by which a connector that
    #: ``upserts`` writes; empty when it declares none.
    primary_key: tuple[str, ...] = ()
    #: The table's ``PARTITIONED BY`` columns, in order (the filesystem sink writes one directory
    #: level per column); empty for an unpartitioned table.
    partition_columns: tuple[str, ...] = ()
    #: ROW columns of ``schema`` that the plan reads only through some of their fields: column
    #: name → those fields' names. A source may fill the other fields with nulls instead of
    #: decoding them (the JSON reader does); it must still produce ``schema`` exactly.
    fields: Mapping[str, tuple[str, ...]] = field(factory=dict)
    #: Columns of ``schema`` that every reader of the source filters to a few constants: column
    #: name → those values. A source may leave out rows holding other values (or NULL), and
    #: need not: the plan filters again. Unlike ``predicate``, it needs no expression evaluated.
    kept_values: Mapping[str, tuple[Any, ...]] = field(factory=dict)

    @property
    def updating(self) -> bool:
        return self.changelog is not None and self.changelog.updating


class SourceReader:
    """Reads one table. The executor polls it in turn with other sources.

    ``poll`` returns a batch with ``spec.schema`` exactly, or ``None`` when nothing is ready
    now. Once ``finished`` is true the reader has no more rows (a bounded source). A bad record
    raises ``clink.errors.RecordError`` naming the file and line, unless the table's options
    say to skip bad records, in which case they are counted in ``metrics['skipped_records']``.
    """

    finished: bool = False
    #: False for a source that never ends by itself (datagen without 'number-of-rows').
    bounded: bool = True

    def __init__(self) -> None:
        self.metrics: dict[str, int] = {}

    def poll(self) -> pa.RecordBatch | None:
        raise NotImplementedError

    def close(self) -> None:
        """Release files and handles; called once, also after a failure."""

    def position(self) -> dict | None:
        """Where the reader is, as JSON-able data that ``seek`` accepts: recorded in checkpoints.
        None for a source that cannot be replayed."""
        return None

    def seek(self, position: dict) -> None:
        """Continue from a ``position`` this kind of reader returned earlier (a restore)."""
        from clink.errors import ConnectorError

        raise ConnectorError(f"{type(self).__name__} cannot resume from a checkpoint: it is not replayable")

    def splits(self) -> tuple[str, ...]:
        """The splits this reader is reading now (a Kafka source: its partitions that have not
        ended), when its watermark is kept per split: the source's watermark is then the least
        of its splits' (a split idle for the table's idle timeout left out), as Flink's
        per-partition watermarks. Empty: one watermark for all the reader gives."""
        return ()

    def metrics_position(self) -> Any:
        """Where the reader is, for metrics: ``position()`` unless reading it has an effect
        (a reader whose position() notes what to commit overrides this)."""
        return self.position()

    def split_lag(self) -> dict[str, int]:
        """Per split, how many records it is behind the end of what there is to read (a Kafka
        source: the consumer lag), where the reader knows without asking a server; {} otherwise.
        Called for metrics, at most a few times a second."""
        return {}

    def split_rows(self) -> Any:
        """For the last batch ``poll`` returned: the index into ``splits()`` of each row's split
        (a numpy integer array), or None when the reader keeps no splits."""
        return None

    def time_rows(self) -> pa.RecordBatch | None:
        """For the last ``poll``: rows the reader read and then left out (they fail
        ``TableSpec.predicate``), that the source's watermark must still cover, with
        ``spec.schema``; None when it left none out. The executor computes the watermark over them
        as over the batch (without them a source that skips rows would hold its watermark back to
        the last row it kept), and counts them as activity for the idle timeout."""
        return None

    def left_out(self) -> int:
        """For the last ``poll``: how many rows the reader read and left out (they fail
        ``TableSpec.kept_values``). They count as source rows for
        ``'execution.checkpointing.interval-rows'``, so that checkpoints come as often as in a
        run that kept them."""
        return 0

    def checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id``, holding this reader's last ``position``, is complete: a
        source may now acknowledge upstream what it read before it (never needed to resume)."""

    def seek_shares(self, positions: list[dict]) -> None:
        """Continue from the ``positions`` of every subtask of an earlier run of this source at
        another parallelism, taking this reader's share of what is left. A reader that cannot
        split resumes only from one whole-table position."""
        if len(positions) == 1:
            self.seek(positions[0])
            return
        from clink.errors import ConnectorError

        raise ConnectorError(f"{type(self).__name__} cannot resume at a parallelism other than the "
                             f"checkpoint's ({len(positions)})")


class SinkWriter:
    """Writes one table. ``write`` gets batches with ``spec.schema``.

    ``close`` is called after the last batch of a successful run and must make the output
    complete and visible; ``abort`` is called instead when the run fails and must leave no
    half-written file under a final name.
    """

    def __init__(self) -> None:
        self.metrics: dict[str, int] = {}

    def write(self, batch: pa.RecordBatch) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    # Two-phase commit, for exactly-once output with checkpoints. A sink that does not take part
    # (print, blackhole) keeps these defaults and is at-least-once: after a restore it may repeat
    # rows written after the last checkpoint.

    def pre_commit(self, checkpoint_id: int) -> dict | None:
        """Make everything written so far durable but not yet visible; return a JSON-able handle
        that ``commit`` (now, or after a restore) uses to make it visible."""
        return None

    def commit(self, checkpoint_id: int, handle: dict | None) -> None:
        """Make a pre-committed checkpoint's output visible. Doing it twice is a no-op."""

    def recover(self, checkpoint_id: int, handle: dict | None, *, lineage: str = "") -> str | None:
        """At a restore from ``checkpoint_id`` (0: none): commit its output if that had not
        happened yet, discard anything written after it, and roll back what later checkpoints of
        the same ``lineage`` (the state directory's token) committed: the run replays those rows.

        Returns one line for the user when something was rolled back. A sink that committed
        output after ``checkpoint_id`` and cannot take it back raises ``ConnectorError`` naming
        itself, the checkpoints and the setting that accepts duplicates
        (``'execution.recovery.accept-duplicates'``)."""
        return None


@record(kw_only=True)
class Connector:
    """A named connector: its options, and factories for readers and writers.

    A connector that cannot be a source (or a sink) leaves that factory ``None``.
    """

    name: str
    description: str
    source_options: tuple[OptionSpec, ...] = ()
    sink_options: tuple[OptionSpec, ...] = ()
    create_source: Callable[[TableSpec, RuntimeContext], SourceReader] | None = None
    create_sink: Callable[[TableSpec, RuntimeContext], SinkWriter] | None = None
    #: Checks the option values (not just names) for a table; returns error messages keyed by
    #: option name. Called by the compiler, so a bad value is reported before anything runs.
    validate: Callable[[Mapping[str, str], pa.Schema, str], dict[str, str]] | None = None
    #: The sink takes an updating stream (batches ending with the row-kind column: +I, -U, +U,
    #: -D); the compiler refuses to write updates to one that does not.
    accepts_updates: bool = False
    #: The sink takes an updating stream when its table declares ``PRIMARY KEY (...) NOT
    #: ENFORCED``: it upserts and deletes by that key (``TableSpec.primary_key``).
    upserts: bool = False
    #: Its source can be read by several subtasks, each taking a disjoint share of the table
    #: (``TableSpec.subtask`` of ``TableSpec.parallelism``) that together give every row once,
    #: and each can resume from the positions of a run at another parallelism
    #: (``SourceReader.seek_shares``). Otherwise one subtask reads the whole table.
    splittable: bool = False
    #: The metadata keys its source fills into ``name TYPE METADATA [FROM 'key']`` columns; the
    #: compiler refuses METADATA columns of any other key (and of a connector with none).
    metadata: tuple[str, ...] = ()
    #: Why a table with these options cannot fill a METADATA column of this key (None: it can),
    #: for metadata that depends on the options (a value format's own); given, it replaces the
    #: check against ``metadata``, which then lists every key any table of the connector may have.
    metadata_problem: Callable[[Mapping[str, str], str], str | None] | None = None
    #: The row kinds its source produces for a table's ``WITH`` options (its values, checked by
    #: ``validate`` first); None, or a mode that is not updating: the source appends. An updating
    #: source's batches end with the row-kind column (``TableSpec.changelog`` tells the reader),
    #: and the compiler treats its table as an updating stream (a changelog source).
    source_changelog: Callable[[Mapping[str, str]], ChangelogMode] | None = None
    #: Fields of its source's rows (paths of names: ``("auction", "id")``) whose non-NULL values
    #: never repeat across the table, whatever its options: ids the source numbers itself. The
    #: compiler uses them as it uses an append-only table's ``PRIMARY KEY``: a Top-N whose
    #: partitions hold such a key behind an interval join forgets each as it ends.
    unique_fields: tuple[tuple[str, ...], ...] = ()
    #: Its table can be read by key for a lookup join (``JOIN t FOR SYSTEM_TIME AS OF ...``):
    #: ``create_lookup(spec, key_columns, ctx)`` gives an object whose ``lookup(keys)`` takes a
    #: table of those columns and returns the table's rows (``spec.schema``) with those keys,
    #: and whose ``close()`` releases it. Otherwise a lookup join reads the table whole first.
    create_lookup: Callable[[TableSpec, tuple[str, ...], RuntimeContext], Any] | None = None
    #: Whether ``create_lookup`` serves a table by these key columns:
    #: ``looks_up(options, primary_key, key_columns)``. None: every table of the connector, by
    #: any columns. A table it does not serve is read whole first.
    looks_up: Callable[[Mapping[str, str], tuple[str, ...], tuple[str, ...]], bool] | None = None

    def options_for(self, role: str) -> tuple[OptionSpec, ...]:
        return self.source_options if role == "source" else self.sink_options


def widen_struct(arr: pa.StructArray, t: pa.StructType) -> pa.StructArray:
    """``arr``, a struct of some of ``t``'s fields, as a ``t``: the fields it lacks are null (what
    a source gives for the ROW fields no query reads, ``TableSpec.fields``)."""
    present = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
    children = [arr.field(present[c.name]) if c.name in present else _nulls(len(arr), c.type) for c in t]
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)


@functools.lru_cache(maxsize=32)
def _nulls(n: int, t: pa.DataType) -> pa.Array:
    """An all-NULL column (immutable, so shared: a source's batches mostly have one length)."""
    return pa.nulls(n, t)
