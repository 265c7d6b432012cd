"""Generated modules are registered with linecache, and errors map back to SQL positions."""

from __future__ import annotations

import traceback

import pytest

import clink
from clink.errors import PipelineError

SQL = """CREATE TABLE t (s STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '3');
SELECT CAST(s AS INT) AS n
FROM t;
"""


def test_a_failure_in_generated_code_shows_the_generated_line_and_the_sql_position() -> None:
    with pytest.raises(PipelineError) as info:
        clink.sql(SQL, name="cast.sql").to_arrow()
    error = info.value
    assert error.where is not None and error.where.startswith("cast.sql:2:8  CAST(s AS INT)")
    # The original exception's traceback passes through the generated chain, and its source
    # line is available, as for any Python module.
    frames = traceback.extract_tb(error.__cause__.__traceback__)
    generated = [f for f in frames if f.filename.startswith("<clink plan cast.sql ")]
    assert generated, [f.filename for f in frames]
    assert generated[-1].name.startswith("chain_")
    assert "K.cast(s, pa.int32())" in generated[-1].line
    assert "# cast.sql:2:8  CAST(s AS INT)" in generated[-1].line
    rendered = error.render({"cast.sql": SQL})
    assert rendered.splitlines() == [
        "cast.sql:2:8: error: pipeline failed: " + error.message,
        " 2 | SELECT CAST(s AS INT) AS n",
        "   |        ^^^^^^^^^^^^^^",
    ]
