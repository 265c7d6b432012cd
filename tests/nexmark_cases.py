"""Nexmark queries with sinks whose output can be compared after crashes and restarts: each one's
sink (a CSV directory for append-only results, a keyed SQLite table for updating ones) and its
INSERT over the views of bench/nexmark/ddl.sql; shared by the crash harness and the cluster tests."""

from __future__ import annotations

import csv
import sqlite3
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "nexmark"

# Each query: its sink (a CSV directory for append-only results, a keyed SQLite table for updating
# ones) and its INSERT, over the views of bench/nexmark/ddl.sql.
QUERIES = {
    "q3": ("CREATE TABLE out (name STRING, city STRING, state STRING, id BIGINT) {csv};\n"
           "INSERT INTO out SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P "
           "ON A.seller = P.id WHERE A.category = 10;"),
    "q4": ("CREATE TABLE out (id BIGINT, final DOUBLE, PRIMARY KEY (id) NOT ENFORCED) {sqlite};\n"
           "INSERT INTO out SELECT Q.category, AVG(Q.final) FROM (SELECT MAX(B.price) AS final, A.category "
           "FROM auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires "
           "GROUP BY A.id, A.category) Q GROUP BY Q.category;"),
    # q5 with the window's start kept: the key its rows are unique by.
    "q5": ("CREATE TABLE out (auction BIGINT, num BIGINT, starttime TIMESTAMP(3), "
           "PRIMARY KEY (auction, starttime) NOT ENFORCED) {sqlite};\n"
           "INSERT INTO out SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime FROM ("
           "SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime FROM TABLE(HOP(TABLE "
           "bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY auction, window_start, "
           "window_end) AS AuctionBids JOIN (SELECT MAX(CountBids.num) AS maxn, CountBids.starttime, "
           "CountBids.endtime FROM (SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime FROM "
           "TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) GROUP BY "
           "auction, window_start, window_end) AS CountBids GROUP BY CountBids.starttime, CountBids.endtime) AS "
           "MaxBids ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime AND "
           "AuctionBids.num >= MaxBids.maxn;"),
    # q6 with the auction's id kept (the key its rows are unique by) and ordered by: winning bids of one
    # seller can share a time, and peers are ordered by arrival, which a restore may change.
    "q6": ("CREATE TABLE out (id BIGINT, seller BIGINT, avg_price DOUBLE, PRIMARY KEY (id) NOT ENFORCED) {sqlite};\n"
           "INSERT INTO out SELECT Q.id, Q.seller, AVG(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.id "
           "ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) FROM (SELECT A.id, A.seller, B.price AS final, B.dateTime, "
           "ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC, B.dateTime ASC) AS rownum "
           "FROM auction AS A, bid AS B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires) "
           "AS Q WHERE Q.rownum <= 1;"),
    "q7": ("CREATE TABLE out (auction BIGINT, price BIGINT, bidder BIGINT, dateTime TIMESTAMP(3)) {csv};\n"
           "INSERT INTO out SELECT B.auction, B.price, B.bidder, B.dateTime FROM bid B JOIN (SELECT MAX(price) AS "
           "maxprice, window_end AS dateTime FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' "
           "SECOND)) GROUP BY window_start, window_end) B1 ON B.price = B1.maxprice WHERE B.dateTime BETWEEN "
           "B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime;"),
    "q8": ("CREATE TABLE out (id BIGINT, name STRING, stime TIMESTAMP(3)) {csv};\n"
           "INSERT INTO out SELECT P.id, P.name, P.starttime FROM (SELECT id, name, window_start AS starttime, "
           "window_end AS endtime FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) "
           "GROUP BY id, name, window_start, window_end) P JOIN (SELECT seller, window_start AS starttime, "
           "window_end AS endtime FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) "
           "GROUP BY seller, window_start, window_end) A ON P.id = A.seller AND P.starttime = A.starttime AND "
           "P.endtime = A.endtime;"),
    "q9": ("CREATE TABLE out (id BIGINT, seller BIGINT, bidder BIGINT, price BIGINT, "
           "PRIMARY KEY (id) NOT ENFORCED) {sqlite};\n"
           "INSERT INTO out SELECT id, seller, bidder, price FROM (SELECT A.id, A.seller, B.bidder, B.price, "
           "ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC) AS rownum FROM auction A, "
           "bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires) WHERE rownum <= 1;"),
    "q11": ("CREATE TABLE out (bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)) "
            "{csv};\n"
            "INSERT INTO out SELECT B.bidder, COUNT(*), SESSION_START(B.dateTime, INTERVAL '10' SECOND), "
            "SESSION_END(B.dateTime, INTERVAL '10' SECOND) FROM bid B "
            "GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND);"),
    "q13": ("CREATE TABLE side_input (key BIGINT, `value` STRING) WITH ('connector' = 'filesystem', "
            f"'path' = '{BENCH / 'side_input.csv'}', 'format' = 'csv');\n"
            "CREATE TABLE out (auction BIGINT, bidder BIGINT, price BIGINT, `value` STRING) {csv};\n"
            "INSERT INTO out SELECT B.auction, B.bidder, B.price, S.`value` FROM (SELECT *, PROCTIME() AS p_time "
            "FROM bid) B JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S ON MOD(B.auction, 10000) = S.key;"),
    "q18": ("CREATE TABLE out (auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3), "
            "PRIMARY KEY (auction, bidder) NOT ENFORCED) {sqlite};\n"
            "INSERT INTO out SELECT auction, bidder, price, dateTime FROM (SELECT *, ROW_NUMBER() OVER "
            "(PARTITION BY bidder, auction ORDER BY dateTime DESC) AS rank_number FROM bid) WHERE rank_number <= 1;"),
    "q19": ("CREATE TABLE out (auction BIGINT, bidder BIGINT, price BIGINT, rank_number BIGINT, "
            "PRIMARY KEY (auction, rank_number) NOT ENFORCED) {sqlite};\n"
            "INSERT INTO out SELECT auction, bidder, price, rank_number FROM (SELECT *, ROW_NUMBER() OVER "
            "(PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid) WHERE rank_number <= 10;"),
    "q20": ("CREATE TABLE out (auction BIGINT, bidder BIGINT, price BIGINT, itemName STRING, category BIGINT) "
            "{csv};\n"
            "INSERT INTO out SELECT auction, bidder, price, itemName, category FROM bid AS B INNER JOIN auction AS A "
            "ON B.auction = A.id WHERE A.category = 10;"),
    # OVER aggregation: each bid with the average of its bidder's last five.
    "over": ("CREATE TABLE out (bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3), recent DOUBLE) {csv};\n"
             "INSERT INTO out SELECT bidder, price, dateTime, AVG(price) OVER (PARTITION BY bidder ORDER BY "
             "dateTime ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) FROM bid;"),
}


#: The sinks, at paths relative to the folder a job runs in (see ``_start``).
CSV = "WITH ('connector' = 'filesystem', 'path' = 'out/', 'format' = 'csv')"
SQLITE = "WITH ('connector' = 'sqlite', 'path' = 'out.db')"


def output(out: Path) -> list[tuple]:
    """The rows a sink at ``out`` (a CSV folder, or ``out.db``) shows, sorted."""
    if out.with_suffix(".db").exists() or not out.exists():
        db = out.with_suffix(".db")
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT * FROM out").fetchall()
            ledger = conn.execute("SELECT name FROM sqlite_master WHERE name = '_clink_pending'").fetchall()
            # With checkpoints, nothing stays pre-committed and unapplied at the end.
            assert not ledger or conn.execute("SELECT COUNT(*) FROM _clink_pending").fetchone()[0] == 0
        return sorted(rows, key=repr)
    rows = []
    for path in sorted(out.iterdir()):
        if not path.name.startswith((".", "_")):  # hidden, and rolled back
            rows.extend(tuple(r) for r in csv.reader(path.open()))
    return sorted(rows)


def assert_local_run_gives(rows: list[tuple], folder: Path, *files: str) -> None:
    """``clink run -i ddl.sql QUERY`` in ``folder``, uninterrupted and in one process, writes
    exactly ``rows`` (what another run there wrote to ``out``, which is moved aside first)."""
    (folder / "out").rename(folder / "out.before")
    local = subprocess.run([sys.executable, "-m", "clink", "run", "-i", "ddl.sql", *files], cwd=folder,
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr
    assert rows and output(folder / "out") == rows
