"""Rewrites run in this order. Each keeps the plan's output schema; the driver checks it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from clink import records
from clink.compiler import ir
from clink.compiler.rewrite.bound_interval_joins import bound_interval_joins
from clink.compiler.rewrite.end_ranks import end_ranks
from clink.compiler.rewrite.fuse_stateless import fuse_stateless
from clink.compiler.rewrite.limit_ranks import limit_ranks
from clink.compiler.rewrite.merge_projections import merge_projections
from clink.compiler.rewrite.prune_projections import prune_projections
from clink.compiler.rewrite.push_filter_below_windows import push_filter_below_windows
from clink.compiler.rewrite.push_filter_into_scan import push_filter_into_scan
from clink.compiler.rewrite.push_filter_through_project import push_filter_through_project
from clink.compiler.rewrite.share_scans import share_scans
from clink.compiler.rewrite.unique_join_sides import unique_join_sides
from clink.compiler.rewrite.use_scan_equalities import use_scan_equalities
from clink.errors import CompilerBug

__all__ = ["RULES", "Rewrite", "run_rewrites", "transform_up"]


@records.record
class Rewrite:
    """A named rule. ``whole_plan`` rules get the root and do their own traversal."""

    name: str
    fn: Callable[[ir.Rel], ir.Rel]
    whole_plan: bool = False


RULES: tuple[Rewrite, ...] = (
    Rewrite("limit_ranks", limit_ranks),
    Rewrite("bound_interval_joins", bound_interval_joins),
    Rewrite("end_ranks", end_ranks),
    Rewrite("push_filter_through_project", push_filter_through_project),
    Rewrite("push_filter_below_windows", push_filter_below_windows),
    Rewrite("push_filter_through_project", push_filter_through_project),
    Rewrite("merge_projections", merge_projections),
    Rewrite("push_filter_into_scan", push_filter_into_scan),
    Rewrite("use_scan_equalities", use_scan_equalities),
    Rewrite("prune_projections", prune_projections, whole_plan=True),
    Rewrite("share_scans", share_scans, whole_plan=True),
    Rewrite("fuse_stateless", fuse_stateless),
    Rewrite("unique_join_sides", unique_join_sides),
)


def transform_up(node: ir.Rel, fn: Callable[[ir.Rel], ir.Rel]) -> ir.Rel:
    """Apply ``fn`` to every node, children first (so ``fn`` sees rewritten inputs)."""
    inputs = tuple(transform_up(child, fn) for child in node.inputs)
    if inputs != node.inputs:
        node = node.with_inputs(inputs)
    return fn(node)


def run_rewrites(plan: ir.Rel, rules: Sequence[Rewrite] = RULES, *,
                 trace: list[tuple[str, ir.Rel]] | None = None) -> ir.Rel:
    """Run ``rules`` in order; with ``trace``, record the plan after each rule that changed it."""
    for rule in rules:
        new = rule.fn(plan) if rule.whole_plan else transform_up(plan, rule.fn)
        if new.schema != plan.schema:
            raise CompilerBug(
                f"rewrite {rule.name!r} changed the output schema\n"
                f"  before: {plan.schema}\n  after:  {new.schema}"
            )
        if trace is not None and new != plan:
            trace.append((rule.name, new))
        plan = new
    return plan
