"""Python functions the Nexmark queries call (q14's ``count_char``).

``CREATE FUNCTION count_char AS 'nexmark_udfs.count_char' LANGUAGE PYTHON`` finds this module on
the Python path: ``bench/nexmark.py`` puts this folder there; by hand, run
``PYTHONPATH=bench/nexmark clink run -i bench/nexmark/ddl.sql bench/nexmark/q14.sql``.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

import clink


@clink.udf(returns="BIGINT", vectorized=True)
def count_char(text: pa.Array, char: pa.Array) -> pa.Array:
    """How many times ``char`` occurs in ``text`` (nexmark-flink's CountChar), a batch at a time."""
    chars = char.unique()
    if len(chars) == 1 and chars[0].is_valid:
        return pc.cast(pc.count_substring(text, chars[0].as_py()), pa.int64())
    # A different character per row: count each distinct one where it applies.
    counts = pa.nulls(len(text), pa.int64())
    for c in chars:
        if c.is_valid:
            here = pc.equal(char, c)
            counts = pc.if_else(here, pc.cast(pc.count_substring(text, c.as_py()), pa.int64()), counts)
    return counts
