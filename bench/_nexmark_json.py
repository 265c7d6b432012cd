"""Nexmark events as one JSON-lines file, for the benchmarks that read JSON (``vs_flink.py``,
``json_formats.py``).

The file has nexmark-flink's event layout: one object per event with ``event_type`` (0 person,
1 auction, 2 bid) and the three ROW columns ``person``, ``auction`` and ``bid``, of which the two
that do not apply are null. Timestamps are written as Flink's ``json`` format writes them
('SQL' standard: ``2024-01-01 00:00:00.000``). It is written once by clink from its ``nexmark``
source and kept under ``bench/data/`` (reused while the event count matches).
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUERIES = HERE / "nexmark"

#: The ``WITH`` clause of ``ddl.sql``'s event table, replaced to read the file.
_WITH = re.compile(r"WITH \(\s*'connector' = 'nexmark'.*?\);", re.DOTALL)

ROWS = {
    "person": "ROW<id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING, "
              "dateTime TIMESTAMP(3), extra STRING>",
    "auction": "ROW<id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, "
               "dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING>",
    "bid": "ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, dateTime TIMESTAMP(3), "
           "extra STRING>",
}


def generator_ddl(events: int) -> str:
    """``ddl.sql`` over clink's generator, with ``events`` events."""
    return re.sub(r"'events\.num'\s*=\s*'\d+'", f"'events.num' = '{events}'", (QUERIES / "ddl.sql").read_text())


def file_ddl(path: Path) -> str:
    """``ddl.sql`` with the event table read from the JSON-lines file ``path`` (clink and Flink
    both accept this text)."""
    with_file = (f"WITH (\n    'connector' = 'filesystem',\n    'path' = '{path}',\n    'format' = 'json'\n);")
    text, count = _WITH.subn(with_file, (QUERIES / "ddl.sql").read_text())
    assert count == 1, "ddl.sql's event table is not where it was"
    return text


def events_file(events: int, folder: Path) -> Path:
    """The JSON-lines file of the first ``events`` Nexmark events, written by clink when missing."""
    import clink

    path = folder / f"nexmark-{events}.json"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f".nexmark-{events}"
    columns = ",\n    ".join(f"{name} {row}" for name, row in ROWS.items())
    text = (f"CREATE TABLE events_file (\n    event_type INT,\n    {columns}\n) WITH ('connector' = 'filesystem', "
            f"'path' = '{out}', 'format' = 'json');\n"
            "INSERT INTO events_file SELECT event_type, person, auction, bid FROM datagen;\n")
    init = folder / f".nexmark-{events}.ddl.sql"
    init.write_text(generator_ddl(events))
    clink.sql(text, name="events.sql", init=[init]).run()
    (part,) = out.iterdir()
    part.rename(path)
    out.rmdir()
    init.unlink()
    return path
