"""HDR-style log-bucket latency histogram on numpy.

Values are non-negative integers (the harness records nanoseconds). Values
below ``2**precision`` get a bucket each; above, every power of two is cut into
``2**(precision-1)`` equal sub-buckets, so a bucket is at most
``1/2**(precision-1)`` of its value wide (0.8 % at the default precision 8) and
a percentile read back as the bucket midpoint is within 0.4 % of a true sample.

Recording is vectorised: the writers buffer raw durations and hand them over
in batches of tens of thousands with :meth:`LogHistogram.record_many`, which
then costs a few nanoseconds per value; a batch split over several histograms
computes its bucket indexes once (``idx``). Histograms with the same precision merge by adding
their counts.
"""

from __future__ import annotations

import numpy as np

_MAX_EXP = 48  # 2**48 ns is about 3 days: far past any latency we record


class LogHistogram:
    """Counts of values in log-linear buckets, plus exact count, sum, min, max."""

    __slots__ = ("precision", "counts", "count", "total", "min", "max")

    def __init__(self, precision: int = 8):
        if not 2 <= precision <= 16:
            raise ValueError("precision must be in 2..16")
        self.precision = precision
        m = 1 << precision
        self.counts = np.zeros(m + (_MAX_EXP - precision + 1) * (m >> 1), dtype=np.int64)
        self.count = 0
        self.total = 0
        self.min = None
        self.max = None

    # --- bucket arithmetic -------------------------------------------------
    def _index(self, values: np.ndarray) -> np.ndarray:
        """Bucket index of each value (a batch split over several histograms indexes once).

        With e = floor(log2 v) and shift = max(e - precision + 1, 0), the index is
        ``(v >> shift) + shift * 2**(precision-1)``: for v below ``2**precision`` that is v
        itself, above it the top ``precision`` bits of v placed after the buckets of the
        lower powers of two. e comes from the float64 exponent field (exact below 2**53):
        far cheaper than np.frexp at millions of values a second.
        """
        p = self.precision
        v = np.maximum(np.asarray(values, dtype=np.int64), 0)
        shift = v.astype(np.float64).view(np.int64)
        shift >>= 52
        shift -= 1023 + p - 1
        np.maximum(shift, 0, out=shift)
        idx = v >> shift
        shift *= 1 << (p - 1)
        idx += shift
        np.minimum(idx, len(self.counts) - 1, out=idx)
        return idx

    def _bounds(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower bound and width of each bucket index."""
        p = self.precision
        m = 1 << p
        idx = np.asarray(idx, dtype=np.int64)
        big = idx >= m
        k = np.where(big, idx - m, 0)
        e = k // (m >> 1) + p
        mant = k % (m >> 1) + (m >> 1)
        shift = e - p + 1
        lo = np.where(big, mant << shift, idx)
        width = np.where(big, np.int64(1) << shift, 1)
        return lo, width

    # --- recording ---------------------------------------------------------
    def record(self, value: int) -> None:
        self.record_many(np.array([value], dtype=np.int64))

    def record_many(self, values, idx=None) -> None:
        """Record every value; ``idx``, when given, is ``self._index(values)`` already computed
        (one batch split over several histograms of the same precision indexes once)."""
        v = np.asarray(values, dtype=np.int64)
        if v.size == 0:
            return
        if idx is None:
            idx = self._index(v)
        self.counts += np.bincount(idx, minlength=len(self.counts))
        self.count += int(v.size)
        self.total += int(v.sum())
        lo, hi = int(v.min()), int(v.max())
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def merge(self, other: "LogHistogram") -> "LogHistogram":
        if other.precision != self.precision:
            raise ValueError("cannot merge histograms of different precision")
        if other.count:
            self.counts += other.counts
            self.count += other.count
            self.total += other.total
            self.min = other.min if self.min is None else min(self.min, other.min)
            self.max = other.max if self.max is None else max(self.max, other.max)
        return self

    @classmethod
    def merged(cls, hists, precision: int = 8) -> "LogHistogram":
        out = cls(precision)
        for h in hists:
            out.merge(h)
        return out

    # --- reading -----------------------------------------------------------
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    def percentile(self, q: float) -> float:
        """Value at percentile ``q`` (0..100), as the midpoint of its bucket."""
        return float(self.percentiles([q])[0])

    def percentiles(self, qs) -> np.ndarray:
        qs = np.asarray(qs, dtype=np.float64)
        if self.count == 0:
            return np.full(qs.shape, np.nan)
        if np.any((qs < 0) | (qs > 100)):
            raise ValueError("percentiles must be within 0..100")
        cum = np.cumsum(self.counts)
        # rank of the sample at q, as numpy's "lower"/"nearest" interpolation picks it
        ranks = np.maximum(1, np.ceil(qs / 100.0 * self.count)).astype(np.int64)
        idx = np.searchsorted(cum, ranks, side="left")
        lo, width = self._bounds(idx)
        mid = lo + (width - 1) / 2.0
        return np.clip(mid, self.min, self.max)

    def summary_us(self) -> dict:
        """mean, p50, p99, p99.9 and max in microseconds (values recorded in ns)."""
        if self.count == 0:
            nan = float("nan")
            return dict(mean=nan, p50=nan, p99=nan, p999=nan, max=nan)
        p50, p99, p999 = self.percentiles([50, 99, 99.9]) / 1000.0
        return dict(mean=self.mean() / 1000.0, p50=float(p50), p99=float(p99),
                    p999=float(p999), max=self.max / 1000.0)
