"""The contract every stateful operator keeps, and what it gets when it opens.

The executor (local or, later, a cluster worker) drives an operator through these calls only:

- ``process(batch, index)``: rows from input ``index`` (0, or 0/1 for the two sides of a join);
  returns the batches to pass downstream, in order.
- ``on_watermark(ts)``: the operator's watermark advanced to ``ts``; returns what that fires.
- ``end_of_input(index)``: input ``index`` ended; returns what that completes.
- ``late_rows``: batches of rows found late while processing; the executor sends them to the
  node's late-row output (if it has one) and empties the list after each call.
- ``metrics``: counters (``late_records``, ``state_bytes``, ...) the executor reads.
- ``snapshot(checkpoint_id, directory)`` → (files written, JSON-able meta), and
  ``restore(files, meta, key_groups=None)``: checkpoint and restore its keyed state
  (``key_groups``: only those groups, for a subtask that owns a range of them).
- ``close()``: let go of resources (the run ended or failed).
- ``settle()``: make the keyed state hold what the operator means by it, before it is read whole.

``OperatorBase`` supplies the calls an operator has no use for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from clink.records import record

if TYPE_CHECKING:
    from collections.abc import Collection

    import pyarrow as pa

    from clink.runtime.context import TaskContext
    from clink.runtime.plan import ChangelogMode
    from clink.runtime.state.backend import StateBackend

__all__ = ["Operator", "OperatorBase", "OperatorEnv"]


class Operator(Protocol):
    late_rows: list[pa.RecordBatch]
    metrics: dict[str, int]

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]: ...

    def on_watermark(self, ts: int) -> list[pa.RecordBatch]: ...

    def end_of_input(self, index: int) -> list[pa.RecordBatch]: ...

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, Any]]: ...

    def restore(self, files: list[Path], meta: dict[str, Any], *,
                key_groups: Collection[int] | None = None) -> None: ...

    def close(self) -> None: ...

    def settle(self) -> None: ...


class OperatorBase:
    """Defaults for the calls of the contract that an operator has no use for."""

    def on_watermark(self, ts: int) -> list[pa.RecordBatch]:
        return []

    def end_of_input(self, index: int) -> list[pa.RecordBatch]:
        return []

    def close(self) -> None:
        pass

    def settle(self) -> None:
        """Bring the keyed state up to date before it is read whole (``job.state``): an operator
        that removes rows lazily writes the removals through."""


@record
class OperatorEnv:
    """What an operator opens with: its task's context, the schemas of its inputs (in the order
    of the node's ``inputs``) and their changelog modes, the job's state backend, its name in
    checkpoints, and the state TTL (``table.exec.state.ttl``, ms; None: state is kept)."""

    task: TaskContext
    input_schemas: tuple[pa.Schema, ...]
    backend: StateBackend
    operator_id: str
    ttl_ms: int | None = None
    #: The changelog mode of each input (append-only when not given).
    input_modes: tuple[ChangelogMode, ...] = ()

    def input_mode(self, index: int = 0) -> ChangelogMode:
        from clink.runtime.plan import APPEND_ONLY

        return self.input_modes[index] if index < len(self.input_modes) else APPEND_ONLY
