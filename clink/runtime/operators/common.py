"""What every stateful operator does the same way: find its max parallelism, open its state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from clink.runtime.state.keygroups import DEFAULT_MAX_PARALLELISM
from clink.runtime.state.memory import MemoryStateBackend

if TYPE_CHECKING:
    from clink.runtime.context import TaskContext
    from clink.runtime.state.backend import OperatorState, StateBackend, StateDescriptor


def max_parallelism(ctx: TaskContext) -> int:
    """The job's number of key groups (``pipeline.max-parallelism``, 128 by default)."""
    return int(ctx.runtime.get("pipeline.max-parallelism") or DEFAULT_MAX_PARALLELISM)


def open_state(backend: StateBackend | None, max_parallelism: int, operator_id: str,
               descriptors: Sequence[StateDescriptor], where: str) -> OperatorState:
    """Open the operator's keyed state on ``backend`` (a memory backend if None), which must
    split keys into the job's ``max_parallelism`` key groups."""
    if backend is None:
        backend = MemoryStateBackend(max_parallelism=max_parallelism)
    elif backend.max_parallelism != max_parallelism:
        raise ValueError(f"{where}: the state backend has max parallelism {backend.max_parallelism}, "
                         f"the job {max_parallelism}")
    return backend.open(operator_id, descriptors)
