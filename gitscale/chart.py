"""`history --chart FILE`: replicas (solid) and demand (dashed) over time, as an SVG."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from gitscale.errors import InputError
from gitscale.timeutil import parse_time

if TYPE_CHECKING:
    from gitscale.commands.history import Entry

W, H, PAD = 900, 360, 50
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def write_chart(entries: "list[Entry]", path: str) -> None:
    if not path.endswith(".svg"):
        raise InputError("--chart", f"{path}: only .svg charts are written")
    points = sorted(entries, key=lambda e: e.time)
    times = [parse_time(e.time) for e in points]
    t0 = min(times, default=datetime.now())
    t1 = max(times, default=t0)
    span = max((t1 - t0).total_seconds(), 1.0)
    top = max([e.replicas for e in points] + [(e.queued or 0) + (e.running or 0) for e in points]
              + [1])

    def xy(when: datetime, value: int) -> str:
        x = PAD + (when - t0).total_seconds() / span * (W - 2 * PAD)
        y = H - PAD - value / top * (H - 2 * PAD)
        return f"{x:.1f},{y:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#444"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#444"/>',
             f'<text x="{PAD - 8}" y="{PAD + 4}" text-anchor="end">{top}</text>',
             f'<text x="{PAD - 8}" y="{H - PAD + 4}" text-anchor="end">0</text>',
             f'<text x="{PAD}" y="{H - PAD + 20}">{escape(t0.isoformat())}</text>',
             f'<text x="{W - PAD}" y="{H - PAD + 20}" text-anchor="end">'
             f'{escape(t1.isoformat())}</text>']
    names = sorted({e.set for e in points})
    for i, name in enumerate(names):
        colour = COLOURS[i % len(COLOURS)]
        mine = [(parse_time(e.time), e) for e in points if e.set == name]
        replicas = " ".join(xy(t, e.replicas) for t, e in mine)
        demand = " ".join(xy(t, (e.queued or 0) + (e.running or 0)) for t, e in mine)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'points="{replicas}"><title>{escape(name)} replicas</title></polyline>')
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-dasharray="4 3" '
                     f'points="{demand}"><title>{escape(name)} demand</title></polyline>')
        parts.append(f'<text x="{W - PAD + 4}" y="{PAD + 16 * i}" fill="{colour}">'
                     f'{escape(name)}</text>')
    parts.append("</svg>")
    try:
        Path(path).write_text("\n".join(parts) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError("--chart", f"{path}: cannot be written: {exc}") from None
