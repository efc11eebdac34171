"""`Timeline`: when each instruction of a trace ran, and its exports (Perfetto JSON, PNG Gantt).

It holds only start/end times and lanes; it does not schedule anything (that is `simulate`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from axon.lazy import matplotlib
from axon.target.trace import Trace

LANE_ORDER = ("tensor", "vector", "scalar", "gpsimd")


@dataclass(frozen=True, eq=False)
class Timeline:
    """Per-instruction start and end (ns from kernel start), lane ("tensor", ..., "dma3"), opcode, line.

    >>> from axon.target.trace import Trace
    >>> tl = Timeline.from_lists(Trace("k", "k.py", "trn1", (), ()), [], [], [])
    >>> len(tl)
    0
    """

    kernel: str
    start_ns: np.ndarray
    end_ns: np.ndarray
    lane: tuple[str, ...]
    opcode: tuple[str, ...]
    line: tuple[int, ...]

    @classmethod
    def from_lists(cls, trace: Trace, starts: list[float], ends: list[float], lanes: list[str]) -> Timeline:
        return cls(
            trace.kernel,
            np.asarray(starts, dtype=np.float64),
            np.asarray(ends, dtype=np.float64),
            tuple(lanes),
            tuple(i.opcode for i in trace.instructions),
            tuple(i.line for i in trace.instructions),
        )

    def __len__(self) -> int:
        return len(self.lane)

    def lanes(self) -> list[str]:
        """Lanes in display order: the compute engines, then the DMA engines that were used."""
        used = set(self.lane)
        dma = sorted((x for x in used if x.startswith("dma")), key=lambda s: int(s[3:] or 0))
        return [e for e in LANE_ORDER if e in used] + dma

    def to_perfetto(self, path: str | Path) -> Path:
        """Write Chrome/Perfetto trace-event JSON (open in ui.perfetto.dev or chrome://tracing)."""
        path = Path(path)
        tids = {name: k + 1 for k, name in enumerate(self.lanes())}
        events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": self.kernel}}]
        events += [
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}}
            for name, tid in tids.items()
        ]
        for k in range(len(self)):
            events.append(
                {
                    "name": self.opcode[k],
                    "ph": "X",
                    "pid": 1,
                    "tid": tids[self.lane[k]],
                    "ts": float(self.start_ns[k]) / 1e3,
                    "dur": float(self.end_ns[k] - self.start_ns[k]) / 1e3,
                    "args": {"index": k, "line": self.line[k]},
                }
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
        return path

    def to_png(self, path: str | Path, max_bars: int = 20000) -> Path:
        """Write a Gantt chart of the engines over time (a matplotlib Figure drawn off-screen).

        Past `max_bars` instructions, neighbouring bars of a lane closer than a pixel are merged so
        that a 100k-instruction kernel still draws in a second.
        """
        mpl = matplotlib()
        path = Path(path)
        lanes = self.lanes()
        span = float(self.end_ns.max()) if len(self) else 1.0
        fig = mpl.figure.Figure(figsize=(12, 0.45 * len(lanes) + 1.2))
        ax = fig.subplots()
        colors = mpl.colormaps["tab10"]
        lane_arr = np.asarray(self.lane, dtype=object)
        for row, name in enumerate(lanes):
            idx = np.nonzero(lane_arr == name)[0]
            bars = _merge(
                self.start_ns[idx] / 1e3, self.end_ns[idx] / 1e3, span / 1e3 / 2000 if len(self) > max_bars else 0
            )
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colors(row % 10))
        ax.set_yticks(range(len(lanes)), lanes)
        ax.invert_yaxis()
        ax.set_xlabel("time (us)")
        ax.set_title(f"{self.kernel}: span {span / 1e3:.2f} us (without launch overhead)")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
        return path


def _merge(starts: np.ndarray, ends: np.ndarray, gap: float) -> list[tuple[float, float]]:
    order = np.argsort(starts, kind="stable")
    out: list[list[float]] = []
    for s, e in zip(starts[order], ends[order]):
        if out and s <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e - s) for s, e in out]
