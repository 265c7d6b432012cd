"""Named points at which a crash test kills this process (the ``'test.fault-point'`` setting).

A spec ``'name:n'`` kills the process with SIGKILL the n-th time point ``name`` is reached (the
first time without ``:n``); no spec never kills. The checkpoint protocol (``executor``) and the
sqlite backend's change-log merge (``state.sqlite``) name their points; docs/checkpoints.md lists
them.
"""

from __future__ import annotations

import os
import signal

__all__ = ["FaultPoint"]


class FaultPoint:
    """Call with a point's name where a crash test may kill the process."""

    def __init__(self, spec: str | None) -> None:
        self.point, _, count = (spec or "").partition(":")
        self.count = int(count or 1)

    def __call__(self, point: str) -> None:
        if self.point and point == self.point:
            self.count -= 1
            if self.count <= 0:
                os.kill(os.getpid(), signal.SIGKILL)
