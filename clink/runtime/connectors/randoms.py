"""Random numbers as a pure function of a key and a counter, vectorized with numpy.

``datagen`` draws each block of rows from ``Randoms(seed, column, block)``: the numbers depend on
nothing else, so a restored job regenerates exactly the rows it had not yet emitted. The mixing
function is SplitMix64's finalizer over ``key + i * golden ratio`` (Steele, Lea and Flood,
"Fast splittable pseudorandom number generators", 2014): statistically solid for test data,
not for cryptography. Unlike ``numpy.random`` it costs nothing to import, which keeps a compiled
pipeline's cold start short.

>>> r = Randoms(7, 0, 0)
>>> r.integers(0, 9, 5, endpoint=True).tolist() == Randoms(7, 0, 0).integers(0, 9, 5, endpoint=True).tolist()
True
>>> bool(((0 <= r.random(1000)) & (r.random(1000) < 1)).all())
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["Randoms"]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _mix(z: int) -> int:
    """SplitMix64's finalizer on one Python int (for keys)."""
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


class Randoms:
    """A stream of uniformly distributed 64-bit words, and the draws ``datagen`` needs from it.

    Successive calls continue the stream; two ``Randoms`` with the same key give the same stream.
    """

    __slots__ = ("_drawn", "_key")

    def __init__(self, *key: int) -> None:
        state = 0
        for part in key:
            state = _mix(((state ^ (part & _MASK)) + _GOLDEN) & _MASK)
        self._key = np.uint64(state)
        self._drawn = 0

    def words(self, n: int) -> np.ndarray:
        """The next ``n`` 64-bit words (uint64)."""
        z = np.arange(self._drawn + 1, self._drawn + n + 1, dtype=np.uint64)
        self._drawn += n
        z *= np.uint64(_GOLDEN)  # wraps modulo 2**64, as intended
        z += self._key
        z ^= z >> np.uint64(30)
        z *= np.uint64(_M1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(_M2)
        z ^= z >> np.uint64(31)
        return z

    def integers(self, low: int, high: int, size: int, dtype: object = np.int64, endpoint: bool = False) -> np.ndarray:
        """``size`` integers in [low, high) — or [low, high] with ``endpoint`` — as ``dtype``.

        The draw is a word modulo the range: the bias is below range / 2**64, nothing a test
        data generator can show.
        """
        top = high if endpoint else high - 1
        if top < low:
            raise ValueError(f"empty range [{low}, {top}]")
        span = top - low + 1
        words = self.words(size)
        if span < 1 << 64:
            words %= np.uint64(span)
        words += np.uint64(low & _MASK)  # two's complement: wraps to low + offset
        return words.view(np.int64).astype(dtype, copy=False)

    def random(self, size: int) -> np.ndarray:
        """``size`` doubles uniform in [0, 1), 53 random bits each."""
        return (self.words(size) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def uniform(self, low: float, high: float, size: int) -> np.ndarray:
        """``size`` doubles uniform in [low, high)."""
        return low + (high - low) * self.random(size)
