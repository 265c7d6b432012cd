"""PNG charts of benchmark runs, drawn with matplotlib (an optional extra: pip install 'clink[charts]').

Each run that samples itself gives ``samples``: rows of (seconds since start, source events so
far, resident bytes). From them: throughput over time and RSS over time, one line per query;
from the latencies: p50/p99 bars per query against its target.
"""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("charts need matplotlib: pip install 'clink[charts]'") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def throughput_series(samples: list[list[float]]) -> tuple[list[float], list[float]]:
    """Events per second between consecutive samples, at the later sample's time."""
    times, rates = [], []
    for (t0, n0, _), (t1, n1, _) in zip(samples, samples[1:]):
        if t1 > t0:
            times.append(t1)
            rates.append((n1 - n0) / (t1 - t0))
    return times, rates


def over_time(results: dict[str, dict], folder: Path, *, title: str) -> list[Path]:
    """throughput.png and rss.png for every result with samples."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, r in results.items():
        times, rates = throughput_series(r.get("samples") or [])
        ax.plot(times, rates, label=name)
    ax.set(title=f"{title}: throughput", xlabel="seconds", ylabel="events/s")
    ax.legend()
    ax.grid(alpha=0.3)
    paths.append(folder / "throughput.png")
    fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, r in results.items():
        samples = r.get("samples") or []
        ax.plot([s[0] for s in samples], [s[2] / 2**20 for s in samples], label=name)
    ax.set(title=f"{title}: resident memory", xlabel="seconds", ylabel="MiB")
    ax.legend()
    ax.grid(alpha=0.3)
    paths.append(folder / "rss.png")
    fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)
    return paths


def latency_charts(results: dict[str, dict], folder: Path, *, rate: int) -> list[Path]:
    """latency.png (p50 and p99 per query, log scale) plus the charts over time."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    names = list(results)
    fig, ax = plt.subplots(figsize=(8, 4))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [results[n]["p50"] or 0 for n in names], width=0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [results[n]["p99"] or 0 for n in names], width=0.4, label="p99")
    ax.set_xticks(list(xs), names)
    ax.set_yscale("log")
    ax.set(title=f"event time to emit at {rate:,} events/s", ylabel="ms")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    path = folder / "latency.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return [path, *over_time(results, folder, title=f"Nexmark at {rate:,} events/s")]
