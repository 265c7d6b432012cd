"""Every differential test runs at parallelism 1 and 4 in this process, and at parallelism 2 on
Ray's workers: the same rows must come out, since partitioning and placement change where rows
are computed, never what is computed."""

from __future__ import annotations

import pytest

from clink.runtime.context import RuntimeContext

PATHS = [pytest.param("local:1", id="p1"), pytest.param("local:4", id="p4", marks=pytest.mark.parallel),
         pytest.param("ray:2", id="ray2", marks=pytest.mark.cluster)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``in_process`` watches the job from inside this process (its state's size,
    a clock it sets): it has no run on Ray, whose workers are other processes."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_ray = callspec is not None and str(callspec.params.get("path", "")).startswith("ray")
        (dropped if on_ray and item.get_closest_marker("in_process") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True, params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs made in the test default to the path's target and subtasks per operator; the path
    (``"local:4"``, ``"ray:2"``) for a test that drives a job by hand."""
    target, _, parallelism = request.param.partition(":")
    if target == "ray":
        request.getfixturevalue("ray_cluster")
    made = RuntimeContext.__post_init__

    def post_init(self: RuntimeContext) -> None:
        made(self)
        self.config.setdefault("parallelism.default", parallelism)
        if target == "ray":
            self.config.setdefault("execution.target", "ray")

    monkeypatch.setattr(RuntimeContext, "__post_init__", post_init)
    return request.param


@pytest.fixture
def top_n_peak(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``[n]``: the most rows any Top-N subtask of this process has held at once (set it back to
    0 between runs). For ``in_process`` tests of how far a Top-N's state grows."""
    from clink.runtime.operators.rank import RankOperator

    peak = [0]
    update = RankOperator._update_state_metrics

    def watched(self: RankOperator) -> None:
        update(self)
        peak[0] = max(peak[0], self.rows.rows())

    monkeypatch.setattr(RankOperator, "_update_state_metrics", watched)
    return peak
