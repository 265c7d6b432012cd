"""The buffer ``clink run --serve`` keeps per query, under any interleaving of batches produced,
clients connecting, reading and leaving (the policy docs/arrow.md states):

- a client reads a gapless run of rows, from the oldest batch kept when it started, in order;
- nothing a connected client has not read is dropped;
- past the bound the buffer holds more only while a connected client has not read its oldest batch,
  and then the job is told to wait.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from clink.serve import QueryServer

SCHEMA = pa.schema([("a", pa.int64())])
LIMIT = 400  # bytes: a batch of n rows holds 8n


class _Context:
    """What the stream asks of its Flight call: whether the client has gone."""

    def is_cancelled(self) -> bool:
        return False


steps = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(1, 30)),
        st.tuples(st.just("connect"), st.just(0)),
        st.tuples(st.just("read"), st.integers(0, 5)),
        st.tuples(st.just("leave"), st.integers(0, 5)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(steps=steps)
def test_the_serve_buffer_never_loses_a_connected_clients_rows(steps) -> None:
    server = QueryServer({"q": SCHEMA}, token="property-token", buffer_bytes=LIMIT, err=io.StringIO())
    clients: list[dict] = []  # its reader id, stream, the rows it got, the oldest row kept when it started
    try:
        log = server._logs["q"]
        produced = 0
        for action, arg in steps:
            if action == "produce":
                server.publish("q", pa.record_batch({"a": pa.array(range(produced, produced + arg), pa.int64())}))
                produced += arg
            elif action == "connect":
                stream = server._stream(log, len(clients), _Context())
                clients.append({"id": len(clients), "stream": stream, "rows": [], "started": False, "oldest": None})
            elif clients:
                client = clients[arg % len(clients)]
                if client["stream"] is None:
                    continue
                if action == "leave":
                    client["stream"].close()
                    client["stream"] = None
                    continue
                if client["started"] and log.readers[client["id"]] >= log.end_seq:
                    continue  # nothing new for it: a read would wait for the next batch
                if not client["started"]:
                    if not log.batches:
                        continue
                    client["oldest"] = log.batches[0][0]
                client["started"] = True
                batch, meta = next(client["stream"])
                first = json.loads(meta)["first_row"]
                assert first == batch.column("a")[0].as_py()  # the metadata says where it is
                client["rows"].extend(batch.column("a").to_pylist())
            # A client reads a gapless run of rows, from the oldest kept when it started.
            for client in clients:
                if client["rows"]:
                    start = client["rows"][0]
                    assert start == client["oldest"]
                    assert client["rows"] == list(range(start, start + len(client["rows"])))
            # Nothing a connected client has not read is gone.
            for cursor in log.readers.values():
                assert log.base_seq <= cursor
            # Over the bound only while a connected client holds the oldest batch; then the job waits.
            if log.bytes > LIMIT and log.batches:
                assert log.readers and min(log.readers.values()) == log.base_seq
                assert not server.wait_for_room(0)
            else:
                assert server.wait_for_room(0)
            assert log.dropped_rows + sum(b.num_rows for _, b in log.batches) == produced
    finally:
        for client in clients:
            if client["stream"] is not None:
                client["stream"].close()
        server.stop(KeyboardInterrupt())
