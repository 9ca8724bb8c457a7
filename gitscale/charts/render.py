"""Charts of runner counts over time: one panel per runner set (history) or per policy (simulate).

Panels are small multiples sharing one time axis. matplotlib (the optional extra
``gitscale[charts]``) draws them with its Agg backend; it is imported only when a chart is drawn,
so the base install and every other command stay small and fast. The file's suffix picks the
format: ``.svg`` or ``.png``.
"""
from __future__ import annotations

import math
import os
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Sequence

from gitscale.errors import GitscaleError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.text import Text

Style = Literal["solid", "dashed", "dotted", "area"]
FORMATS = {".svg": "svg", ".png": "png"}
INSTALL = "pip install 'gitscale[charts]'"
# One colour per series position, the same in every panel: replicas, demand, running, ...
COLOURS = ["#1f5fa8", "#e0701a", "#3a9a48", "#8e5bb5", "#b8413a", "#6b6b6b"]
WIDTHS = {"solid": 2.2, "dashed": 1.8, "dotted": 1.8, "area": 0.0}
DASHES = {"solid": "-", "dashed": (0, (4, 2.2)), "dotted": (0, (1, 1.6)), "area": "-"}


class ChartError(GitscaleError):
    """A chart cannot be drawn or written: the file's suffix, matplotlib missing, a write error."""


@dataclass(frozen=True)
class Series:
    """One line, or a shaded area from 0 (``style="area"``, drawn beneath the lines).

    A step series holds each value until the next time (a replica count holds until the next
    commit); its last value holds to the right edge of the chart. NaN leaves a gap. Later series
    are drawn over earlier ones, so a dashed line stays visible where it meets a solid one."""

    label: str
    times: Sequence[datetime]
    values: Sequence[float]
    step: bool = True
    style: Style = "solid"

    def __post_init__(self) -> None:
        if len(self.times) != len(self.values):
            raise ValueError(f"{self.label}: {len(self.times)} times but {len(self.values)} values")
        if any(t.tzinfo is None for t in self.times):
            raise ValueError(f"{self.label}: times need a UTC offset")
        if self.style not in WIDTHS:
            raise ValueError(f"{self.label}: style {self.style!r} is not one of {sorted(WIDTHS)}")


@dataclass(frozen=True)
class Panel:
    title: str
    series: Sequence[Series]
    ylabel: str = "runners"


def chart_format(path: Path) -> str:
    """``svg`` or ``png`` from the suffix; anything else is a ChartError naming the file."""
    if path.is_dir():
        raise ChartError(f"{path}: is a directory; name the chart's file, such as "
                         f"{path / 'history.svg'}")
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ChartError(f"{path}: a chart is written as .svg or .png, not "
                         f"{path.suffix or 'a file without a suffix'!r}")
    return fmt


def require(path: Path) -> None:
    """Fail early (before any other work) when ``path`` cannot be a chart or matplotlib is
    missing."""
    chart_format(path)
    if not path.parent.is_dir():
        raise ChartError(f"{path}: cannot be written: {path.parent} is not a directory")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ChartError(f"{path}: charts need matplotlib, which is not installed: "
                         f"{INSTALL}") from None


def render(panels: Sequence[Panel], path: Path, *, title: str | None = None,
           tz: tzinfo = timezone.utc, start: datetime | None = None,
           end: datetime | None = None, note: str | None = None) -> None:
    """Draw ``panels`` (top to bottom) into ``path``, replacing it whole or not at all.

    ``start``/``end`` set the time window (default: the first and the last time of any series);
    ``note`` is shown at the top right, e.g. to say that the window is zoomed."""
    require(path)
    fmt = chart_format(path)
    figure = build_figure(panels, title=title, tz=tz, start=start, end=end, note=note)
    _save(figure, path, fmt)


def window(panels: Sequence[Panel], start: datetime | None,
           end: datetime | None) -> tuple[datetime, datetime]:
    times = [t for p in panels for s in p.series for t in s.times]
    lo = start or min(times, default=end or datetime.now(timezone.utc))
    hi = end or max(times, default=lo)
    if hi <= lo:
        lo, hi = (lo - timedelta(minutes=5), hi + timedelta(minutes=5)) if hi == lo else (hi, lo)
    return lo, hi


def build_figure(panels: Sequence[Panel], *, title: str | None = None,
                 tz: tzinfo = timezone.utc, start: datetime | None = None,
                 end: datetime | None = None, note: str | None = None) -> "Figure":
    """The matplotlib figure ``render`` saves (tests look inside it)."""
    if not panels:
        raise ValueError("a chart needs at least one panel")
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from gitscale.charts.axis import time_axis, zone_name

    lo, hi = window(panels, start, end)
    each = 2.4 if len(panels) <= 4 else 1.8
    with rc_context({"font.size": 10, "axes.titlesize": 11, "axes.spines.top": False,
                     "axes.spines.right": False}):
        figure = Figure(figsize=(10, 1.3 + each * len(panels)), layout="constrained")
        canvas = FigureCanvasAgg(figure)
        axes = list(figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0])
        names = []
        for n, (ax, panel) in enumerate(zip(axes, panels), start=1):
            _draw_panel(ax, panel, lo, hi, n)
            names.append(ax.set_title(panel.title, loc="left", fontweight="bold"))
            time_axis(ax, lo, hi, tz)
        axes[-1].set_xlabel(f"time ({zone_name(tz, hi)})")
        _legends(figure, axes, panels, title)
        if note:
            _place_note(canvas, axes, names[0], note)
    return figure


def _place_note(canvas: "FigureCanvasAgg", axes: Sequence["Axes"], beside: "Text",
                note: str) -> None:
    """Top right, beside the first panel's title; under the time axis if it would touch it."""
    noted = axes[0].set_title(note, loc="right", fontsize=9, color="#555555")
    canvas.figure.draw_without_rendering()
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    if beside.get_window_extent(renderer).expanded(1.04, 1.0).overlaps(
            noted.get_window_extent(renderer)):
        noted.set_text("")
        axes[-1].set_xlabel(f"{axes[-1].get_xlabel()}\n{note}")


def _draw_panel(ax: "Axes", panel: Panel, lo: datetime, hi: datetime, n: int) -> None:
    """Draw every series; each is an SVG group ``panelN-seriesI`` (both from 1)."""
    from gitscale.charts.axis import value_axis

    top = 0.0
    for i, series in enumerate(panel.series):
        times, values = list(series.times), [float(v) for v in series.values]
        if series.step and times and times[-1] < hi and not math.isnan(values[-1]):
            times, values = times + [hi], values + [values[-1]]  # the last value holds
        colour, gid = COLOURS[i % len(COLOURS)], f"panel{n}-series{i + 1}"
        if series.style == "area":
            known = [not math.isnan(v) for v in values]
            ax.fill_between(times, 0, values, where=known,  # type: ignore[arg-type]
                            step="post" if series.step else None, color=colour, alpha=0.22,
                            linewidth=0, label=series.label, zorder=2, gid=gid)
        else:
            ax.plot(times, values, label=series.label,  # type: ignore[arg-type]
                    drawstyle="steps-post" if series.step else "default", color=colour,
                    linewidth=WIDTHS[series.style], linestyle=DASHES[series.style], zorder=3 + i,
                    gid=gid)
        top = max([top] + _visible(times, values, lo, hi, series.step))
    value_axis(ax, top, panel.ylabel)


def _visible(times: list[datetime], values: list[float], lo: datetime, hi: datetime,
             step: bool) -> list[float]:
    """The values drawn inside [lo, hi]: for a step line, each holds until the next time."""
    shown = []
    for i, (t, v) in enumerate(zip(times, values)):
        until = times[i + 1] if i + 1 < len(times) else t
        if not math.isnan(v) and t <= hi and (until >= lo if step else t >= lo):
            shown.append(v)
    return shown


def _legends(figure: "Figure", axes: Sequence["Axes"], panels: Sequence[Panel],
             title: str | None) -> None:
    """One legend under the title when every panel draws the same series, else one per panel
    (to its right) and the title above them all."""
    labels = [tuple(s.label for s in p.series) for p in panels]
    if len(set(labels)) == 1:
        handles, names = axes[0].get_legend_handles_labels()
        legend = figure.legend(handles, names, loc="outside upper center", frameon=False,
                               ncols=max(1, len(names)), title=title)
        legend.get_title().set_fontsize(13)
    else:
        for ax in axes:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                      frameon=False)
        if title:
            figure.suptitle(title, fontsize=13)


def _save(figure: "Figure", path: Path, fmt: str) -> None:
    from matplotlib import rc_context

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".{fmt}", dir=path.parent)
    except OSError as exc:
        raise ChartError(f"{path}: cannot be written: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle, rc_context({"svg.hashsalt": "gitscale"}):
            metadata = {"Date": None} if fmt == "svg" else {"Software": None}
            with warnings.catch_warnings():  # a character the font lacks: drawn as a box,
                # not a warning quoting matplotlib's source on stderr
                warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from")
                figure.savefig(handle, format=fmt, dpi=150, metadata=metadata)
        os.chmod(tmp, 0o644)  # not mkstemp's 0600: a chart is for others to read
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ChartError(f"{path}: cannot be written: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
