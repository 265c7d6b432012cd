"""Every differential test runs at parallelism 1 and at 4: the same rows must come out, since
partitioning changes where rows are computed, never what is computed."""

from __future__ import annotations

import pytest

from clink.runtime.context import RuntimeContext


@pytest.fixture(autouse=True, params=[1, pytest.param(4, marks=pytest.mark.parallel)], ids=["p1", "p4"])
def parallelism(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Runs made in the test default to ``request.param`` subtasks per operator."""
    made = RuntimeContext.__post_init__

    def post_init(self: RuntimeContext) -> None:
        made(self)
        self.config.setdefault("parallelism.default", str(request.param))

    monkeypatch.setattr(RuntimeContext, "__post_init__", post_init)
    return request.param
