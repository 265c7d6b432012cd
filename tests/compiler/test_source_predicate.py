"""A source learns the values a column keeps when every reader filters it to a few constants.

``P.Source.kept_values`` maps such a column to its values (``{'event_type': (2,)}``) when every
node reading the source is a chain whose filter pushed into the scan holds ``c = k``,
``c IN (k, ...)`` or an OR of those as a conjunct: the union of each reader's constants. A reader
that does not filter, or filters otherwise, leaves the source with none. The chains keep their
filters, so a source that ignores them gives the same results.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import clink
from clink import records
from clink.compiler import ir
from clink.compiler.codegen.module import _source_predicate
from clink.compiler.physical import ChainOp, SourceOp
from clink.runtime.plan import Source

DDL = (Path(__file__).resolve().parents[2] / "bench" / "nexmark" / "ddl.sql").read_text()
def kept(query: str) -> list[list[int] | None]:
    """Per source of the plan of ``query`` over the Nexmark DDL: the event types it keeps."""
    plan = clink.compile(DDL + query).runtime_plan
    sources = [n for n in plan.nodes if isinstance(n, Source)]
    assert sources
    return [list(s.kept_values["event_type"]) if s.kept_values else None for s in sources]


@pytest.mark.parametrize(("query", "expected"), [
    ("SELECT price FROM bid", [[2]]),
    ("SELECT P.name, A.id FROM auction AS A JOIN person AS P ON A.seller = P.id", [[1], [0]]),
    ("SELECT event_type FROM datagen WHERE event_type IN (0, 2) AND bid.price > 5", [[0, 2]]),
    ("SELECT event_type FROM datagen WHERE event_type = 1 OR event_type = 2", [[1, 2]]),
    ("SELECT event_type FROM datagen WHERE event_type IN (1, 2) AND event_type = 2", [[2]]),
    # Nothing to keep to: no filter, a filter on something else, an OR with another column.
    ("SELECT event_type FROM datagen", [None]),
    ("SELECT event_type FROM datagen WHERE bid.price > 5", [None]),
    ("SELECT event_type FROM datagen WHERE event_type = 2 OR bid.price > 5", [None]),
    ("SELECT event_type FROM datagen WHERE event_type > 1", [None]),
    ("SELECT event_type FROM datagen WHERE event_type = CAST(NULL AS INT)", [None]),
])
def test_the_source_keeps_what_every_reader_filters_to(query: str, expected: list) -> None:
    assert kept(query) == expected


def physical(query: str) -> tuple:
    """The physical operators of ``query`` over the Nexmark DDL."""
    from clink.compiler.bind import bind_script
    from clink.compiler.parse import parse_script
    from clink.compiler.physical import plan_physical
    from clink.compiler.rewrite import run_rewrites
    from clink.runtime.connectors import default_registry

    bound = bind_script(parse_script(DDL + query, "q.sql"), default_registry(), None)
    return plan_physical(bound, tuple(run_rewrites(s.sink) for s in bound.statements)).ops


def with_twin(ops: tuple, predicate: ir.Expr | None) -> tuple:
    """``ops`` with a second chain reading the source of the first, filtered by ``predicate``."""
    chain = next(op for op in ops if isinstance(op, ChainOp) and op.scan_predicate is not None)
    return (*ops, records.evolve(chain, id=len(ops) + 1, scan_predicate=predicate))


def test_two_readers_keep_the_union_and_an_unfiltered_reader_keeps_everything() -> None:
    """Scans with different filters get sources of their own, so a source read by two chains
    with different filters takes a plan built by hand: the first chain's twin reads it too."""
    ops = physical("SELECT event_type FROM datagen WHERE event_type = 2")
    (source,) = [op for op in ops if isinstance(op, SourceOp)]
    assert _source_predicate(source, ops) == {"event_type": (2,)}
    chain = next(op for op in ops if isinstance(op, ChainOp) and op.scan_predicate is not None)
    column = chain.scan_predicate.args[0]
    persons = ir.Call(fn="eq", args=(column, ir.Literal(value=0, type=column.type, span=None)), type=pa.bool_(),
                      span=None)
    assert _source_predicate(source, with_twin(ops, persons)) == {"event_type": (0, 2)}
    assert _source_predicate(source, with_twin(ops, None)) == {}
    other = ir.Call(fn="gt", args=(column, ir.Literal(value=0, type=column.type, span=None)), type=pa.bool_(),
                    span=None)
    assert _source_predicate(source, with_twin(ops, other)) == {}


def test_the_filter_stays_in_the_plan() -> None:
    """The source's predicate only lets it skip rows: the chain above still filters."""
    plan = clink.compile(DDL + "SELECT price FROM bid")
    assert "keep = pc.equal(event_type, pa.scalar(2, pa.int32()))" in plan.source
