"""Settings: one duration parser for every duration setting, and no setting accepted and ignored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import clink
from clink.errors import SqlError
from clink.runtime.settings import SETTINGS, check_setting, parse_duration

TABLE = ("CREATE TABLE t (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '5', "
         "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '5');\n")


@pytest.mark.parametrize(("text", "ms"), [
    ("500 ms", 500), ("500ms", 500), ("250", 250), ("10 s", 10_000), ("10 sec", 10_000), ("3 seconds", 3_000),
    ("1 min", 60_000), ("2 minutes", 120_000), ("1 m", 60_000), ("1 h", 3_600_000), ("1 hour", 3_600_000),
    ("2 hours", 7_200_000), ("1 d", 86_400_000), ("2 days", 172_800_000), ("1.5 s", 1_500), ("1 HOUR", 3_600_000),
])
def test_durations_in_flinks_forms(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "one hour", "1 fortnight", "-1 s", "1 s 2 ms"])
def test_unreadable_durations_say_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError, match="write it like '500 ms'"):
        parse_duration(text)


@pytest.mark.parametrize("key", [k for k in SETTINGS if k in (
    "execution.checkpointing.interval", "table.exec.state.ttl", "table.exec.source.idle-timeout",
    "table.exec.allowed-lateness")])
def test_every_duration_setting_takes_the_same_forms(key: str) -> None:
    for text in ("1 hour", "2 hours", "1 h", "10 s", "500 ms", "1 min", "1 d"):
        assert check_setting(key, text) is None, (key, text)


def test_checkpoint_interval_of_an_hour_runs(tmp_path: Path) -> None:
    # It used to be refused by the runtime's own duration parser while the TTL took the same text.
    text = TABLE + ("SET 'execution.checkpointing.interval' = '1 hour';\nSET 'table.exec.state.ttl' = '1 hour';\n"
                    "SELECT COUNT(*) AS n FROM t;")
    from clink.runtime.context import RuntimeContext

    result = clink.sql(text, context=RuntimeContext(state_dir=tmp_path))
    assert result.to_arrow().to_pylist() == [{"n": 5}]


def test_an_unknown_setting_is_refused_at_its_key() -> None:
    with pytest.raises(SqlError) as info:
        clink.sql(TABLE + "SET 'table.optimizer.distinct-agg.split.enabled' = 'true';\nSELECT a FROM t;")
    err = info.value
    assert "unknown setting 'table.optimizer.distinct-agg.split.enabled'" in str(err)
    assert (err.span.line, err.span.col) == (2, 5)


def test_a_misspelt_setting_suggests_the_right_one() -> None:
    with pytest.raises(SqlError) as info:
        clink.sql(TABLE + "SET 'execution.checkpointing.intervall' = '10 s';\nSELECT a FROM t;")
    assert "did you mean 'execution.checkpointing.interval'" in info.value.render({})


def test_a_bad_value_is_refused_at_the_value() -> None:
    with pytest.raises(SqlError) as info:
        clink.sql(TABLE + "SET 'state.backend' = 'rocksdb';\nSELECT a FROM t;")
    assert "'state.backend'" in str(info.value) and "'rocksdb'" in str(info.value)
    assert (info.value.span.line, info.value.span.col) == (2, 23)


def test_set_on_the_command_line_is_checked(tmp_path: Path) -> None:
    (tmp_path / "x.sql").write_text(TABLE + "SELECT a FROM t;\n")
    done = subprocess.run([sys.executable, "-m", "clink", "run", "x.sql", "--set", "execution.checkpointing.intervall=1 s"],
                          cwd=tmp_path, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2
    assert "unknown setting 'execution.checkpointing.intervall'" in done.stderr
    assert "did you mean 'execution.checkpointing.interval'" in done.stderr
    assert "Traceback" not in done.stderr
