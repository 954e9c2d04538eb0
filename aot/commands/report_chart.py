"""The memory-plan chart of `aot report`: each arena tensor as a rectangle (x: the kernel steps it
is live, y: its arena offset), the axes' ticks and the legend of the largest tensors. Geometry
only; templates/report/report.html.j2 draws it as inline SVG."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PLOT_WIDTH, PLOT_HEIGHT = 960, 420
# Room around the plot for the tick labels and axis titles.
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 72, 12, 10, 48
MAX_X_TICKS, MAX_Y_TICKS = 16, 8
LEGEND_ENTRIES = 10


@dataclass(frozen=True)
class Lifetime:
    """One tensor's place in the arena: its bytes, offset and first..last kernel step (inclusive)."""

    name: str
    size: int
    offset: int
    start: int
    end: int


def _color(i: int) -> str:
    return f"hsl({(i * 47) % 360}, 60%, 62%)"


def _nice_step(span: float, max_ticks: int) -> float:
    """The smallest 1, 2 or 5 times a power of ten that splits `span` into at most `max_ticks` parts."""
    raw = span / max_ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)


def _x_ticks(steps: int) -> list[dict[str, Any]]:
    """Kernel indices (as in the report's Kernels table) under the middle of their column."""
    stride = max(1, math.ceil(_nice_step(steps, MAX_X_TICKS)))
    return [{"pos": round((k + 0.5) / steps * PLOT_WIDTH, 2), "label": str(k)} for k in range(0, steps, stride)]


def y_unit(arena: int) -> tuple[str, int]:
    """The y axis' unit: KiB, or bytes for an arena under 1 KiB (whose KiB ticks would read 0.005)."""
    return ("KiB", 1024) if arena >= 1024 else ("bytes", 1)


def _y_ticks(arena: int) -> list[dict[str, Any]]:
    """Arena offsets in y_unit, 0 at the top, down to the arena's size."""
    unit = y_unit(arena)[1]
    span = arena / unit
    step = _nice_step(span, MAX_Y_TICKS)
    count = math.floor(span / step + 1e-9)
    ticks = [{"pos": round(i * step * unit / arena * PLOT_HEIGHT, 2), "label": f"{round(i * step, 6):g}"}
             for i in range(count + 1)]
    # The arena's end too, unless a tick is already at (or too near) the bottom to label it apart.
    if PLOT_HEIGHT - ticks[-1]["pos"] >= 14:
        ticks.append({"pos": float(PLOT_HEIGHT), "label": f"{span:.4g}"})
    return ticks


def _size_text(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB"


def memory_chart(lifetimes: Sequence[Lifetime], steps: int, arena_bytes: int) -> Mapping[str, Any]:
    """Rectangles in plot coordinates (0..PLOT_WIDTH, 0..PLOT_HEIGHT), ticks and legend entries."""
    steps, arena = max(steps, 1), max(arena_bytes, 1)
    ordered = sorted(lifetimes, key=lambda t: (t.offset, t.start, t.name))
    rects = []
    for i, t in enumerate(ordered):
        rects.append({
            "x": round(t.start / steps * PLOT_WIDTH, 2), "w": round((t.end - t.start + 1) / steps * PLOT_WIDTH, 2),
            "y": round(t.offset / arena * PLOT_HEIGHT, 2), "h": round(max(t.size / arena * PLOT_HEIGHT, 1.0), 2),
            "color": _color(i), "name": t.name, "size": t.size,
            "title": f"{t.name}: {t.size} bytes at offset {t.offset}, kernels {t.start}-{t.end}",
            "legend": f"{_size_text(t.size)} at offset {_size_text(t.offset) if t.offset else 0}, "
                      f"kernels {t.start}-{t.end}",
        })
    largest = sorted(rects, key=lambda r: (-r["size"], r["y"], r["x"]))[:LEGEND_ENTRIES]
    return {
        "rects": rects, "legend": largest, "x_ticks": _x_ticks(steps),
        # An empty arena (every tensor an input, output or weight) gets no scale to read off.
        "y_ticks": _y_ticks(arena) if arena_bytes > 0 else [{"pos": 0.0, "label": "0"}],
        "y_label": f"arena offset ({y_unit(arena)[0]})",
        "chart_width": PLOT_WIDTH, "chart_height": PLOT_HEIGHT,
        "margin_left": MARGIN_LEFT, "margin_top": MARGIN_TOP,
        "svg_width": MARGIN_LEFT + PLOT_WIDTH + MARGIN_RIGHT, "svg_height": MARGIN_TOP + PLOT_HEIGHT + MARGIN_BOTTOM,
    }
