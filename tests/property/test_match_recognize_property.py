"""MATCH_RECOGNIZE against a plain matcher written here: one row at a time, one partial match at
a time, conditions evaluated in Python on the row values. Random prices (with NULLs), symbols,
patterns (greedy and reluctant quantifiers), conditions that read only the row or the partial
match, skip rules and batch sizes: the rows must come out the same."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clink.runtime.operators import match_fixed
from clink.testing import run_select

QUANTIFIERS = {"": (1, 1, True), "+": (1, None, True), "*": (0, None, True), "?": (0, 1, True),
               "{2}": (2, 2, True), "{1,2}": (1, 2, True), "+?": (1, None, False), "*?": (0, None, False),
               "{1,3}?": (1, 3, False)}
LAST_QUANTIFIERS = ["", "+?", "{2}", "{1,3}?"]
VARIABLES = ["A", "B", "C"]


def _sql_lt(a, b) -> bool:
    return a is not None and b is not None and a < b


def _condition(kind: str, c: int, v: int, p: int | None):
    """(SQL text, test(row price, rows mapped so far as [(variable, price)])) for variable ``v``."""
    name = VARIABLES[v]
    if kind == "gt":
        return f"{name}.price > {c}", lambda price, mapped: _sql_lt(c, price)
    if kind == "lt":
        return f"{name}.price < {c}", lambda price, mapped: _sql_lt(price, c)
    if kind == "rise" and p is not None:
        prev = VARIABLES[p]

        def rise(price, mapped):
            last = next((x for var, x in reversed(mapped) if var == p), None)
            return _sql_lt(last, price)
        return f"{name}.price > LAST({prev}.price)", rise
    if kind == "sum":
        def total(price, mapped):
            values = [x for var, x in mapped if var == v and x is not None] + ([price] if price is not None else [])
            return bool(values) and sum(values) < c
        return f"SUM({name}.price) < {c}", total
    if kind == "avg":
        def average(price, mapped):
            values = [x for var, x in mapped if var == v and x is not None] + ([price] if price is not None else [])
            return bool(values) and sum(values) < c * len(values)
        return f"AVG(CAST({name}.price AS DOUBLE)) < {c}", average
    return None, lambda price, mapped: True


def reference(rows: list[tuple[str, int, int | None]], terms: list[tuple[int, int | None, bool]],
              tests: list, skip: str) -> list[tuple]:
    """(symbol, first row time, last row time, rows, SUM(price)) per match, matched row by row."""
    out = []
    last = len(terms) - 1
    for symbol in sorted({r[0] for r in rows}):
        runs: list[dict] = []
        done: list[dict] = []
        for seq, (_, ts, price) in ((i, r) for i, r in enumerate(rows) if r[0] == symbol):
            nxt, complete = [], []
            for run in [*runs, {"start": seq, "term": -1, "count": 0, "rows": []}]:
                mapped = [(var, x) for var, _, x, _ in run["rows"]]
                term, count = run["term"], run["count"]
                can_take = term >= 0 and (terms[term][1] is None or count < terms[term][1])
                took = can_take and tests[term](price, mapped)
                moves = [(term, count + 1)] if took else []
                if term < 0 or count >= terms[term][0]:
                    if not (term >= 0 and terms[term][2] and took):
                        j = term + 1
                        while j <= last:
                            ok = tests[j](price, mapped)
                            if ok:
                                moves.append((j, 1))
                            if terms[j][0] != 0 or (terms[j][2] and ok):
                                break  # must match here, or greedy and taking here
                            j += 1
                for t, n in moves:
                    new = {"start": run["start"], "term": t, "count": n, "rows": [*run["rows"], (t, ts, price, seq)]}
                    if t == last and n >= terms[t][0] and (not terms[t][2] or n == terms[t][1]):
                        complete.append(new)
                    else:
                        nxt.append(new)
            runs = nxt
            done = sorted(done + complete, key=lambda m: m["start"])
            while done and not (runs and min(r["start"] for r in runs) <= done[0]["start"]):
                m = done.pop(0)
                prices = [x for _, _, x, _ in m["rows"] if x is not None]
                out.append((symbol, m["rows"][0][1], m["rows"][-1][1], len(m["rows"]),
                            sum(prices) if prices else None))
                cut = m["rows"][-1][3] + 1 if skip == "past_last" else m["start"] + 1
                runs = [r for r in runs if r["start"] >= cut]
                done = [d for d in done if d["start"] >= cut]
    return sorted(out, key=repr)


@st.composite
def cases(draw):
    n = draw(st.integers(1, 40))
    symbols = draw(st.lists(st.sampled_from(["X", "Y"]), min_size=n, max_size=n))
    prices = draw(st.lists(st.one_of(st.none(), st.integers(0, 9)), min_size=n, max_size=n))
    size = draw(st.integers(1, 3))
    quantifiers = [draw(st.sampled_from(list(QUANTIFIERS))) for _ in range(size - 1)]
    quantifiers.append(draw(st.sampled_from(LAST_QUANTIFIERS)))
    conditions = [(draw(st.sampled_from(["gt", "lt", "rise", "sum", "avg", "none"])), draw(st.integers(0, 12)))
                  for _ in range(size)]
    skip = draw(st.sampled_from(["past_last", "next_row"]))
    batch = draw(st.sampled_from([1, 2, 5, 100]))
    # Rows arrive up to 3 s out of time order (the watermark waits 5 s).
    jitter = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return symbols, prices, quantifiers, conditions, skip, batch, jitter


@pytest.mark.parametrize("path", ["auto", "runs"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_match_recognize_matches_a_row_by_row_matcher(path: str, case) -> None:
    """``auto``: a pattern of fixed length goes the batch path (match_fixed.py), others follow
    runs; ``runs``: every pattern follows runs."""
    with pytest.MonkeyPatch.context() as patch:
        if path == "runs":
            patch.setattr(match_fixed, "places", lambda node: None)
        _check(case)


def _check(case) -> None:
    symbols, prices, quantifiers, conditions, skip, batch, jitter = case
    base = dt.datetime(2026, 1, 1)
    times = [base + dt.timedelta(seconds=i) for i in range(len(prices))]
    arrival = sorted(range(len(prices)), key=lambda i: (i + jitter[i], i))
    table = pa.table({"symbol": [symbols[i] for i in arrival],
                      "rowtime": pa.array([times[i] for i in arrival], pa.timestamp("ms")),
                      "price": pa.array([prices[i] for i in arrival], pa.int64())})
    terms = [QUANTIFIERS[q] for q in quantifiers]
    defines, tests = [], []
    for v, (kind, c) in enumerate(conditions):
        text, test = _condition(kind, c, v, v - 1 if v else None)
        tests.append(test)
        if text is not None:
            defines.append(f"{VARIABLES[v]} AS {text}")
    if not defines:
        defines.append(f"{VARIABLES[0]} AS TRUE")
    pattern = " ".join(f"{VARIABLES[v]}{q}" for v, q in enumerate(quantifiers))
    rule = {"past_last": "SKIP PAST LAST ROW", "next_row": "SKIP TO NEXT ROW"}[skip]
    query = (f"SELECT * FROM Ticker MATCH_RECOGNIZE (PARTITION BY symbol ORDER BY rowtime "
             f"MEASURES FIRST(rowtime) AS first_t, LAST(rowtime) AS last_t, COUNT(*) AS n, SUM(price) AS total "
             f"AFTER MATCH {rule} PATTERN ({pattern}) DEFINE {', '.join(defines)})")
    got = run_select(query, watermarks={"Ticker": "rowtime AS rowtime - INTERVAL '5' SECOND"},
                     row_group_size=batch, Ticker=table).to_pylist()
    rows = list(zip(symbols, times, prices, strict=True))
    expected = reference(rows, terms, tests, skip)
    assert sorted(((r["symbol"], r["first_t"], r["last_t"], r["n"], r["total"]) for r in got), key=repr) == expected, query
