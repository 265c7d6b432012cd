"""``clink plan diff``: its verdict agrees with what a real restart does.

Each case runs the old pipeline with a state directory to a checkpoint (``clink run
--stop-with-checkpoint-after``), runs ``clink plan diff`` (against the checkpoint, and against
the old SQL), then restarts with the new SQL: a change found compatible must restore and
finish with exactly the output of an uninterrupted run; one found incompatible must be refused,
naming the operator the diff named."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from clink.cli import main

OLD = """\
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' HOUR)
WITH ('connector' = 'datagen', 'number-of-rows' = '20000', 'seed' = '12', 'batch-size' = '500',
      'fields.auction.min' = '1', 'fields.auction.max' = '5', 'fields.price.min' = '1', 'fields.price.max' = '99');
CREATE TABLE totals (auction BIGINT, window_start TIMESTAMP(3), n BIGINT, top BIGINT)
WITH ('connector' = 'filesystem', 'path' = '{out}/totals/', 'format' = 'csv');
INSERT INTO totals
SELECT auction, window_start, COUNT(*), MAX(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, auction;
"""
#: A second pipeline in the same job: a group aggregate into an upserted table.
COUNTS = """\
CREATE TABLE counts (price BIGINT, n BIGINT, PRIMARY KEY (price) NOT ENFORCED)
WITH ('connector' = 'sqlite', 'path' = '{out}/counts.db', 'table-name' = 'counts');
INSERT INTO counts SELECT price, COUNT(*) FROM bid GROUP BY price;
"""


EVERY = ("--set", "execution.checkpointing.interval-rows=3000")


def committed_rows(folder: Path) -> list[tuple]:
    rows = []
    for path in sorted(folder.iterdir()) if folder.exists() else []:
        if not path.name.startswith((".", "_")):
            rows.extend(tuple(r) for r in csv.reader(path.open()))
    return sorted(rows)


def run(sql: str, tmp: Path, name: str, *args: str) -> int:
    path = tmp / name
    path.write_text(sql.format(out=tmp / "out"))
    return main(["run", str(path), *args])


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    tmp = tmp_path_factory.mktemp("reference")
    assert run(OLD, tmp, "old.sql") == 0
    rows = committed_rows(tmp / "out" / "totals")
    assert len(rows) > 50
    return rows


def diff_then_restart(tmp: Path, old: str, new: str, capsys) -> tuple[int, str, int, str]:
    """Run ``old`` to its second checkpoint, diff ``new`` against the checkpoint and against
    ``old`` (which must agree), restart with ``new``; return both exit codes and outputs."""
    state = tmp / "state"
    assert run(old, tmp, "old.sql", "--state-dir", str(state), *EVERY, "--stop-with-checkpoint-after", "2") == 0
    (tmp / "new.sql").write_text(new.format(out=tmp / "out"))
    capsys.readouterr()
    code = main(["plan", "diff", str(tmp / "new.sql"), "--state-dir", str(state)])
    report = capsys.readouterr().out
    assert main(["plan", "diff", str(tmp / "old.sql"), str(tmp / "new.sql")]) == code
    from_sql = capsys.readouterr().out
    # Both compare the same identities: the same lines, apart from the title and positions.
    def lines(text: str) -> list[str]:
        return [re.sub(r" \(at [^)]*\)", "", line) for line in text.splitlines()[1:]]
    assert lines(from_sql) == lines(report)
    restarted = main(["run", str(tmp / "new.sql"), "--state-dir", str(state), *EVERY])
    return code, report, restarted, capsys.readouterr().err


def line_of(report: str, verdict: str) -> str:
    found = [line for line in report.splitlines() if line.split()[:1] == [verdict]]
    assert len(found) == 1, report
    return found[0]


def test_a_stateless_change_and_a_renamed_sink_column_keep_the_state(tmp_path: Path, expected, capsys) -> None:
    new = (OLD.replace("GROUP BY window_start", "WHERE price > 0 GROUP BY window_start")
           .replace("COUNT(*), MAX(price)", "COUNT(*) AS cnt, MAX(price) + 0 AS top")
           .replace("n BIGINT, top BIGINT", "bids BIGINT, top BIGINT"))
    code, report, restarted, _ = diff_then_restart(tmp_path, OLD, new, capsys)
    assert code == 0, report
    assert re.search(r"kept +window +window-[0-9a-f]{10} \(at new.sql:7:1\): same state signature", report)
    assert re.search(r"kept +source +source:bid", report) and re.search(r"kept +sink +sink:totals", report)
    assert report.rstrip().endswith("compatible: a restart keeps every operator's state")
    assert restarted == 0
    assert committed_rows(tmp_path / "out" / "totals") == expected


@pytest.mark.parametrize("change, why", [
    (("GROUP BY window_start, window_end, auction", "GROUP BY window_start, window_end, auction, price"),
     "keys changed: (auction) to (auction, price)"),
    (("MAX(price)", "MAX(auction)"), "aggregates changed: COUNT(*), MAX(price) to COUNT(*), MAX(auction)"),
    (("INTERVAL '1' HOUR", "INTERVAL '2' HOUR"),
     "window changed: TUMBLE(size=3600000 ms) to TUMBLE(size=7200000 ms)"),
], ids=["keys", "aggregate", "window-size"])
def test_a_changed_window_aggregate_loses_its_state_and_the_restart_is_refused(
        tmp_path: Path, change: tuple[str, str], why: str, capsys) -> None:
    new = OLD.replace(*change)
    code, report, restarted, err = diff_then_restart(tmp_path, OLD, new, capsys)
    assert code == 1, report
    lost = line_of(report, "lost")
    assert why in lost, report
    uid = re.search(r"window-[0-9a-f]{10}", lost).group(0)
    assert "NOT compatible" in report
    assert restarted == 2
    assert f"cannot be restored into operator {uid}" in err, err


def test_a_renamed_sink_table_renames_the_operator_and_is_refused(tmp_path: Path, capsys) -> None:
    new = OLD.replace("totals (auction", "totals_v2 (auction").replace("INSERT INTO totals", "INSERT INTO totals_v2")
    code, report, restarted, err = diff_then_restart(tmp_path, OLD, new, capsys)
    assert code == 1
    renamed = line_of(report, "renamed")
    old_uid, new_uid = re.search(r"(window-[0-9a-f]{10}) -> (window-[0-9a-f]{10})", renamed).groups()
    assert old_uid != new_uid and "UID(" in renamed
    assert re.search(r"new +sink +sink:totals_v2", report) and re.search(r"removed +sink +sink:totals", report)
    assert restarted == 2
    assert f"holds no state for operator {new_uid}" in err, err


def test_a_removed_operator_loses_its_state_and_the_restart_is_refused(tmp_path: Path, capsys) -> None:
    code, report, restarted, err = diff_then_restart(tmp_path, OLD + COUNTS, OLD, capsys)
    assert code == 1
    lost = line_of(report, "lost")
    uid = re.search(r"group-[0-9a-f]{10}", lost).group(0)
    assert "operator removed" in lost
    assert re.search(r"removed +sink +sink:counts", report)
    assert restarted == 2
    assert f"holds state of operator(s) {uid}, which this pipeline no longer has" in err, err


def test_a_new_operator_has_no_state_and_the_restart_is_refused(tmp_path: Path, capsys) -> None:
    code, report, restarted, err = diff_then_restart(tmp_path, OLD, OLD + COUNTS, capsys)
    assert code == 1
    new = [line for line in report.splitlines() if line.split()[:1] == ["new"]]
    # The second INSERT reads bid through a source of its own, which has no position either.
    assert [line.split()[1:3] for line in new] == [["source", "source:bid#2"], ["group", new[1].split()[2]],
                                                   ["sink", "sink:counts"]], report
    assert "no position for it" in new[0]
    uid = re.search(r"group-[0-9a-f]{10}", new[1]).group(0)
    assert "(at new.sql:12:20)" in new[1] and "no state for it" in new[1]
    assert "nothing to restore" in new[2]
    assert restarted == 2
    assert f"holds no state for operator {uid}" in err, err


def test_usage_and_sql_errors_exit_2_with_a_position(tmp_path: Path, capsys) -> None:
    (tmp_path / "new.sql").write_text(OLD.format(out=tmp_path / "out"))
    assert main(["plan", "diff", str(tmp_path / "new.sql")]) == 2
    assert "OLD.sql NEW.sql" in capsys.readouterr().err
    assert main(["plan", "diff", str(tmp_path / "new.sql"), "--state-dir", str(tmp_path / "none")]) == 2
    assert "holds no checkpoints" in capsys.readouterr().err
    (tmp_path / "bad.sql").write_text(OLD.replace("MAX(price)", "MAX(prise)").format(out=tmp_path / "out"))
    assert main(["plan", "diff", str(tmp_path / "new.sql"), str(tmp_path / "bad.sql")]) == 2
    err = capsys.readouterr().err
    assert "bad.sql:7:" in err and "prise" in err and "^" in err


ASKS = """\
CREATE TABLE ask (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '5000', 'batch-size' = '500');
CREATE TABLE asks (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out}/asks/', 'format' = 'csv');
INSERT INTO asks SELECT id FROM ask WHERE id > 0;
"""


def test_a_removed_source_and_sink_drop_their_positions_and_the_restart_goes_on(tmp_path: Path, expected,
                                                                              capsys) -> None:
    code, report, restarted, _ = diff_then_restart(tmp_path, OLD + ASKS, OLD, capsys)
    assert code == 0, report
    assert re.search(r"removed +source +source:ask: no longer read", report)
    assert re.search(r"removed +sink +sink:asks", report)
    assert restarted == 0
    assert committed_rows(tmp_path / "out" / "totals") == expected


def test_another_state_backend_loses_the_state(tmp_path: Path, capsys) -> None:
    state = tmp_path / "state"
    assert run(OLD, tmp_path, "old.sql", "--state-dir", str(state), *EVERY, "--set", "state.backend=sqlite",
               "--stop-with-checkpoint-after", "1") == 0
    capsys.readouterr()
    assert main(["plan", "diff", str(tmp_path / "old.sql"), "--state-dir", str(state)]) == 1
    lost = line_of(capsys.readouterr().out, "lost")
    assert "the state backend changed (sqlite to memory)" in lost
    assert main(["plan", "diff", str(tmp_path / "old.sql"), "--state-dir", str(state),
                 "--set", "state.backend=sqlite"]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "old.sql"), "--state-dir", str(state), *EVERY]) == 2
    assert "cannot be restored" in capsys.readouterr().err


def test_a_checkpoint_of_an_older_clink_is_compared_by_its_ids_and_signatures(tmp_path: Path) -> None:
    """A job.json without the kind and position of each operator (written before they were
    recorded): the kind comes from the id, and the verdict is the same."""
    from clink.runtime.plan_diff import checkpoint_identities, compatible, diff

    state = tmp_path / "state"
    assert run(OLD, tmp_path, "old.sql", "--state-dir", str(state), *EVERY, "--stop-with-checkpoint-after", "1") == 0
    import json

    from clink.runtime.checkpoint import CheckpointStore

    info, _ = CheckpointStore(state).latest()
    job = json.loads((info.path / "job.json").read_text())
    current = checkpoint_identities(job)
    for entry in job["operators"].values():
        for key in ("kind", "span", "view", "states"):
            entry.pop(key)
    older = checkpoint_identities(job)
    assert {uid: (i.kind, i.signature) for uid, i in older.items()} == \
           {uid: (i.kind, i.signature) for uid, i in current.items()}
    (uid,) = job["operators"]
    assert older[uid].kind == "window" and older[uid].position == "" and current[uid].position == "old.sql:7:1"
    changed = {**older, uid: type(older[uid])(uid, "window", "", older[uid].signature.replace("MAX", "MIN"))}
    assert not compatible(diff(older, changed)) and compatible(diff(older, current))


def test_another_insert_reading_the_same_table_agrees_with_the_restart(tmp_path: Path, capsys) -> None:
    """Another INSERT from ``bid`` reads it through a source node of its own, ``source:bid#2``,
    which has no position in the checkpoint: whatever the restore decides, the diff says the same."""
    cheap = ("CREATE TABLE cheap (auction BIGINT, price BIGINT) "
             "WITH ('connector' = 'filesystem', 'path' = '{out}/cheap/', 'format' = 'csv');\n"
             "INSERT INTO cheap SELECT auction, price FROM bid WHERE price < 10;\n")
    code, report, restarted, err = diff_then_restart(tmp_path, OLD, OLD + cheap, capsys)
    assert code in (0, 1) and (code == 0) == (restarted == 0), (report, err)
    if code == 1:
        assert re.search(r"new +source +source:bid#2", report)
        assert "holds no position for source:bid#2" in err


DISTINCT = """\
CREATE TABLE bid (auction BIGINT, price BIGINT)
WITH ('connector' = 'datagen', 'number-of-rows' = '5000', 'seed' = '3', 'batch-size' = '500',
      'fields.auction.min' = '1', 'fields.auction.max' = '5', 'fields.price.min' = '1', 'fields.price.max' = '99');
CREATE TABLE counts (auction BIGINT, prices BIGINT, PRIMARY KEY (auction) NOT ENFORCED)
WITH ('connector' = 'sqlite', 'path' = '{out}/counts.db', 'table-name' = 'counts');
INSERT INTO counts SELECT auction, COUNT(DISTINCT price) FROM bid GROUP BY auction;
"""


def test_a_group_by_whose_distinct_counts_are_kept_another_way_loses_its_state(tmp_path: Path) -> None:
    """A GROUP BY's state signature covers its COUNT(DISTINCT) counts, not only its
    accumulators: a checkpoint that kept them another way (as clink did before they became a
    value state) is lost, and the reason names both layouts."""
    import json

    from clink.runtime.checkpoint import CheckpointStore
    from clink.runtime.plan_diff import checkpoint_identities, compatible, diff

    state = tmp_path / "state"
    assert run(DISTINCT, tmp_path, "q.sql", "--state-dir", str(state), *EVERY, "--stop-with-checkpoint-after", "1") == 0
    info, _ = CheckpointStore(state).latest()
    current = checkpoint_identities(json.loads((info.path / "job.json").read_text()))
    (uid,) = [u for u, i in current.items() if i.kind == "group"]
    signature = current[uid].signature
    assert "grouped by 1" in signature  # the distinct counts' state is part of it
    old_layout = signature.split(" | ", 1)[1].split(" ; ")[0]  # the accumulators alone
    older = {**current, uid: type(current[uid])(uid, "group", "", signature.split(" | ", 1)[0] + " | " + old_layout)}
    changes = diff(older, current)
    assert not compatible(changes)
    (lost,) = [c for c in changes if c.verdict == "lost"]
    assert f"the layout of its state changed: was {old_layout}, now " in lost.reason
    assert "grouped by 1" in lost.reason
