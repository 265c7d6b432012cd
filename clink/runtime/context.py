"""The explicit context a pipeline runs in: configuration, connectors, clock, output streams.

Nothing in the runtime reads global state; whatever a connector or an operator needs from its
surroundings arrives through a ``RuntimeContext`` (for the whole job) or a ``TaskContext``
(for one node).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import pyarrow as pa

from clink.records import evolve, field, record

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from clink.runtime.memo import ValueMemo
    from clink.runtime.registry import ConnectorRegistry
    from clink.runtime.udf import FunctionRegistry, ScalarFunction

__all__ = ["RuntimeContext", "TaskContext", "system_clock_ms"]


def system_clock_ms() -> int:
    """Wall-clock time in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def _default_registry() -> ConnectorRegistry:
    from clink.runtime.registry import default_registry

    return default_registry()


def _value_memo() -> ValueMemo:
    from clink.runtime.memo import ValueMemo

    return ValueMemo()


def _empty_functions() -> FunctionRegistry:
    from clink.runtime.udf import FunctionRegistry

    return FunctionRegistry()


@record(frozen=False, kw_only=True)
class RuntimeContext:
    """Everything a job may use from outside itself.

    ``config`` holds the string settings (``SET 'k' = 'v'`` in SQL, then overrides from the
    caller). ``functions`` holds the Python UDFs given from Python (``clink.sql(...,
    functions=[...])``), which generated code looks up by name. ``clock`` gives processing time in milliseconds; tests pass a fixed one.
    ``state_dir`` is a local directory; a ``file://`` URI given as a string becomes its path, and
    any other URI is refused (``clink.runtime.fs.local_directory``). ``filesystems`` gives the
    ``pyarrow.fs`` filesystem for a URI scheme (``{"s3": S3FileSystem(endpoint_override=...)}``),
    used for connector paths with that scheme instead of resolving the URI alone.
    """

    config: dict[str, str] = field(factory=dict)
    connectors: ConnectorRegistry = field(factory=_default_registry)
    functions: FunctionRegistry = field(factory=_empty_functions)
    clock: Callable[[], int] = system_clock_ms
    stdout: TextIO = field(factory=lambda: sys.stdout)
    #: Where a print sink with ``'standard-error' = 'true'`` writes.
    stderr: TextIO = field(factory=lambda: sys.stderr)
    state_dir: Path | None = None
    filesystems: Mapping[str, pafs.FileSystem] = field(factory=dict)
    #: Receives the rows of bare ``SELECT`` queries (the ``collect`` sink): (query name, batch).
    on_result: Callable[[str, pa.RecordBatch], None] | None = None

    def __post_init__(self) -> None:
        if self.state_dir is not None and not isinstance(self.state_dir, Path):
            from clink.runtime.fs import local_directory

            self.state_dir = local_directory(self.state_dir)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.config.get(key, default)

    def with_config(self, extra: Mapping[str, str]) -> RuntimeContext:
        return evolve(self, config={**self.config, **extra})

    @property
    def time_zone(self) -> str:
        """The session time zone (``table.local-time-zone``, UTC when not set) as an Arrow time
        zone: how TIMESTAMP_LTZ values read as wall-clock times."""
        text = self.config.get("table.local-time-zone")
        if text is None:
            return "UTC"
        from clink.runtime.settings import parse_time_zone

        try:
            return parse_time_zone(text)
        except ValueError as exc:
            from clink.errors import UsageError

            raise UsageError(f"'table.local-time-zone': {exc}") from None


@record(frozen=False, kw_only=True)
class TaskContext:
    """What one running subtask of a node sees: the job's context, its node's id, its place among
    the node's subtasks, and its metrics."""

    runtime: RuntimeContext
    node_id: int
    metrics: dict[str, int] = field(factory=dict)
    #: Which of its node's subtasks this is (0-based), of how many, and the key groups it owns.
    subtask: int = 0
    parallelism: int = 1
    key_groups: range | None = None
    #: What the task's string functions remember of values they have seen (``memo.py``).
    memo: ValueMemo = field(factory=lambda: _value_memo())
    #: The subtask's current input watermark (ms since the epoch: the minimum over its channels;
    #: a source's, its own), None before the first: what CURRENT_WATERMARK reads. The executor
    #: sets it as the watermark advances.
    watermark: int | None = None

    def now(self) -> int:
        """Processing time in milliseconds since the epoch."""
        return self.runtime.clock()

    @property
    def time_zone(self) -> str:
        """The session time zone (see ``RuntimeContext.time_zone``)."""
        return self.runtime.time_zone

    def function(self, name: str) -> ScalarFunction:
        """The Python UDF ``name`` from the job's ``RuntimeContext.functions`` (generated code calls it)."""
        found = self.runtime.functions.get(name)
        if found is None:
            from clink.errors import UsageError

            known = ", ".join(self.runtime.functions.names()) or "none"
            raise UsageError(f"the plan calls Python function {name}, which is not in the RuntimeContext's "
                             f"functions (known: {known}); pass it: RuntimeContext(functions="
                             f"FunctionRegistry.of([{name.lower()}]))")
        return found
