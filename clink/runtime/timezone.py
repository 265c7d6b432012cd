"""TIMESTAMP_LTZ and the session time zone: instants and the wall clock they show.

A ``TIMESTAMP_LTZ`` value is an instant, stored as Arrow ``timestamp(unit, tz="UTC")``; it reads
as a wall-clock time (a ``TIMESTAMP``) in the session time zone, ``table.local-time-zone``
(``ctx.time_zone``). These helpers convert whole arrays both ways with Arrow's time-zone kernels
(tz database rules, daylight saving time included); none loops over rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc

__all__ = ["epoch_ms", "from_local", "local_ms", "local_watermark", "to_local"]

Value = pa.Array | pa.ChunkedArray | pa.Scalar


def to_local(a: Value, zone: str) -> Value:
    """TIMESTAMP_LTZ values (instants) as the wall-clock TIMESTAMPs they show in ``zone``."""
    naive = pa.timestamp(a.type.unit)
    if zone != "UTC":
        a = pc.local_timestamp(pc.cast(a, pa.timestamp(a.type.unit, tz=zone)))
    return pc.cast(a, naive)


def from_local(a: Value, zone: str) -> Value:
    """Wall-clock TIMESTAMPs read in ``zone`` as the instants they name (TIMESTAMP_LTZ).

    A time that occurs twice (when clocks go back) is the earlier instant, as in Java; a time
    that does not occur (when clocks go forward) is the first instant after the gap."""
    if zone != "UTC":
        a = pc.assume_timezone(a, timezone=zone, ambiguous="earliest", nonexistent="latest")
    return pc.cast(a, pa.timestamp(a.type.unit, tz="UTC"))


def local_ms(ms: np.ndarray, zone: str) -> np.ndarray:
    """Epoch milliseconds as the wall-clock milliseconds they show in ``zone`` (the epoch
    milliseconds of that wall clock read in UTC), DST included."""
    if zone == "UTC" or not len(ms):
        return ms
    instants = pc.cast(pa.array(ms, pa.int64()), pa.timestamp("ms", tz=zone))
    return pc.cast(pc.local_timestamp(instants), pa.int64()).to_numpy(zero_copy_only=False)


def epoch_ms(local: np.ndarray, zone: str) -> np.ndarray:
    """The inverse of ``local_ms``: wall-clock milliseconds in ``zone`` as epoch milliseconds."""
    if zone == "UTC" or not len(local):
        return local
    instants = from_local(pc.cast(pa.array(local, pa.int64()), pa.timestamp("ms")), zone)
    return pc.cast(instants, pa.int64()).to_numpy(zero_copy_only=False)


def local_watermark(ms: int, zone: str) -> int:
    """The wall-clock milliseconds in ``zone`` that a watermark at the instant ``ms`` has passed:
    a window ending at or before it may fire.

    That is the wall clock at ``ms``, except in the hour before clocks go back: its wall-clock
    times will come again, so the watermark stays just before that hour until they have (Flink
    likewise fires a window at the last instant its end occurs). In a fixed-offset zone this is
    just the wall clock."""
    if zone == "UTC":
        return ms
    local = int(local_ms(np.array([ms], np.int64), zone)[0])
    latest = pc.assume_timezone(pc.cast(pa.array([local], pa.int64()), pa.timestamp("ms")), timezone=zone,
                                ambiguous="latest", nonexistent="latest")
    again = int(pc.cast(latest, pa.int64())[0].as_py())
    if again <= ms:
        return local
    # Clocks go back at some instant in (ms, again]: before it the wall clock runs in step with
    # time from ``ms``, after it it is behind. Find that instant by bisection (once per watermark).
    lo, hi = ms, again
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if int(local_ms(np.array([mid], np.int64), zone)[0]) - (mid - ms) == local:
            lo = mid
        else:
            hi = mid
    return int(local_ms(np.array([hi], np.int64), zone)[0]) - 1
