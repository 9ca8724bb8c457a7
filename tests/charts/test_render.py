"""gitscale.charts.render: what the drawn figure shows, read back from the figure and the files."""
from __future__ import annotations

import re
import os
import sys
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from matplotlib import dates as mdates
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from gitscale.charts.render import ChartError, Panel, Series, build_figure, render

T0 = datetime(2026, 11, 23, 8, 40, tzinfo=timezone.utc)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def replicas(values: tuple[float, ...] = (1, 5, 2), label: str = "replicas") -> Series:
    return Series(label, [at(0), at(10), at(30)][:len(values)], values)


def line(figure: Figure, label: str, panel: int = 0) -> Line2D:
    return next(ln for ln in figure.axes[panel].get_lines() if ln.get_label() == label)


def drawn_value(ln: Line2D, when: datetime) -> float:
    """The y of the drawn path at ``when`` (the path is what the renderer strokes)."""
    x = mdates.date2num(when)
    vertices = ln.get_path().vertices
    for (x0, y0), (x1, y1) in zip(vertices, vertices[1:]):
        if x0 <= x < x1:
            return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    raise AssertionError(f"nothing drawn at {when}")


def drawn(figure: Figure) -> RendererAgg:
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    figure.draw(renderer)
    return renderer


def texts_outside(figure: Figure) -> list[str]:
    """Every visible, non-empty text whose extent leaves the canvas."""
    renderer = drawn(figure)
    texts: list[Text] = [t for t in figure.texts]
    if figure._suptitle is not None:
        texts.append(figure._suptitle)
    for legend in figure.legends + [ax.get_legend() for ax in figure.axes if ax.get_legend()]:
        texts += [legend.get_title(), *legend.get_texts()]
    for ax in figure.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        texts += ax.get_xticklabels() + ax.get_yticklabels()
    canvas = figure.bbox
    outside = []
    for text in texts:
        if not (text.get_visible() and text.get_text().strip()):
            continue
        box = text.get_window_extent(renderer)
        if box.x0 < canvas.x0 - 0.5 or box.x1 > canvas.x1 + 0.5 or \
                box.y0 < canvas.y0 - 0.5 or box.y1 > canvas.y1 + 0.5:
            outside.append(text.get_text())
    assert len([t for t in texts if t.get_text().strip()]) > 10  # the check saw the texts
    return outside


def test_a_count_holds_until_the_next_time_and_to_the_right_edge() -> None:
    figure = build_figure([Panel("linux", [replicas()])], end=at(60))
    ln = line(figure, "replicas")
    assert ln.get_drawstyle() == "steps-post"
    assert drawn_value(ln, at(5)) == 1  # between the first two commits: the earlier one's
    assert drawn_value(ln, at(9.99)) == 1
    assert drawn_value(ln, at(20)) == 5
    assert drawn_value(ln, at(59)) == 2  # the last count holds to the end of the window


def test_a_series_that_is_not_a_step_is_interpolated() -> None:
    figure = build_figure([Panel("p", [Series("wait", [at(0), at(10)], [0, 10], step=False)])])
    assert drawn_value(line(figure, "wait"), at(5)) == pytest.approx(5)


def test_a_gap_for_unknown_values() -> None:
    nan = float("nan")
    figure = build_figure([Panel("p", [Series("demand", [at(0), at(10), at(20)], [3, nan, 4])])],
                          end=at(30))
    ys = line(figure, "demand").get_path().vertices[:, 1]
    assert any(y != y for y in ys)  # NaN: the line breaks
    assert drawn_value(line(figure, "demand"), at(25)) == 4


def test_the_svg_steps_have_only_horizontal_and_vertical_segments(tmp_path: Path) -> None:
    path = tmp_path / "c.svg"
    render([Panel("linux", [replicas((1, 5, 2)), Series("demand", [at(0), at(10), at(30)],
                                                        [0, 4, 1], style="dashed")])], path,
           end=at(60))
    root = ET.parse(path).getroot()
    groups = {g.get("id"): g for g in root.iter("{http://www.w3.org/2000/svg}g")}
    d = next(groups["panel1-series1"].iter("{http://www.w3.org/2000/svg}path")).get("d")
    points = [tuple(map(float, p)) for p in re.findall(r"[ML] ([-\d.]+) ([-\d.]+)", d or "")]
    assert len(points) >= 6
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        assert x0 == pytest.approx(x1, abs=0.01) or y0 == pytest.approx(y1, abs=0.01)
    assert "panel1-series2" in groups and "legend_1" in groups


def test_every_text_stays_inside_the_canvas() -> None:
    long = "gitscale, buffer 2: p95 wait 61 s, 1,234 runner-minutes (1.21x the oracle)"
    shared = [Panel(f"{name}  ({n} scaling commits)", [replicas(), replicas((0, 3), "demand")],
                    ylabel="runners / jobs") for n, name in enumerate(["gpu", "linux-x64"])]
    mixed = [Panel(long, [replicas()]), Panel("x" * 90, [replicas(label="a long label " * 3)])]
    for panels in (shared, mixed):
        figure = build_figure(panels, title="Runner sets: replicas and demand", note="zoomed "
                              "on the busiest stretch, 08:41–09:48: 24 of 25 commits")
        assert texts_outside(figure) == []


def test_the_canvas_check_catches_a_clipped_text() -> None:
    figure = build_figure([Panel("p", [replicas()])])
    figure.text(0.98, 0.5, "linux-x64 cut off at the edge")
    assert texts_outside(figure) == ["linux-x64 cut off at the edge"]


def test_one_legend_for_panels_drawing_the_same_series_else_one_each() -> None:
    same = build_figure([Panel(n, [replicas(), replicas(label="demand")]) for n in "ab"],
                        title="T")
    assert len(same.legends) == 1 and not any(ax.get_legend() for ax in same.axes)
    assert [t.get_text() for t in same.legends[0].get_texts()] == ["replicas", "demand"]
    assert same.legends[0].get_title().get_text() == "T"
    differ = build_figure([Panel("a", [replicas()]), Panel("b", [replicas(label="other")])])
    assert not differ.legends
    assert [[t.get_text() for t in ax.get_legend().get_texts()] for ax in differ.axes] == [
        ["replicas"], ["other"]]


def test_panels_share_the_time_axis_with_gridlines() -> None:
    figure = build_figure([Panel(n, [replicas()]) for n in "abc"])
    assert len(figure.axes) == 3
    assert figure.axes[0].get_shared_x_axes().joined(figure.axes[0], figure.axes[2])
    drawn(figure)
    assert all(ax.xaxis.get_gridlines()[0].get_visible() for ax in figure.axes)
    assert all(ax.yaxis.get_gridlines()[0].get_visible() for ax in figure.axes)
    assert [ax.get_title(loc="left") for ax in figure.axes] == ["a", "b", "c"]


@pytest.mark.parametrize("tz, first", [
    pytest.param(timezone.utc, "08:40\nMon 23 Nov 2026", id="utc"),
    pytest.param(ZoneInfo("Europe/Berlin"), "09:40\nMon 23 Nov 2026", id="berlin"),
])
def test_time_ticks_name_the_date_only_where_it_changes(tz, first):  # type: ignore[no-untyped-def]
    figure = build_figure([Panel("p", [replicas()])], tz=tz, start=at(0), end=at(80))
    drawn(figure)
    labels = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    assert labels[0] == first and all(re.fullmatch(r"\d\d:\d\d", t) for t in labels[1:])
    assert 5 <= len(labels) <= 10
    minutes = {mdates.num2date(x).minute for x in figure.axes[0].xaxis.get_minorticklocs()}
    assert minutes <= set(range(0, 60, 5)) and len(minutes) > 3  # 09:05 can be read off
    assert "UTC" in figure.axes[0].get_xlabel() or "Berlin" in figure.axes[0].get_xlabel()
    night = build_figure([Panel("p", [replicas()])], start=at(-300), end=at(1000))
    drawn(night)
    labels = [t.get_text() for t in night.axes[0].get_xticklabels()]
    assert labels[0].endswith("Mon 23 Nov 2026")
    assert [t for t in labels[1:] if "\n" in t] == ["00:00\nTue 24 Nov"]


def test_the_value_axis_counts_whole_runners_from_zero() -> None:
    figure = build_figure([Panel("p", [replicas((1, 13, 2))])], end=at(40))
    drawn(figure)
    ticks = figure.axes[0].get_yticks()
    assert ticks[0] == 0 and all(t == int(t) for t in ticks)
    assert figure.axes[0].get_ylim()[1] > 13  # headroom above the highest count
    assert figure.axes[0].get_ylabel() == "runners"


def test_png_is_drawn_with_the_series_colours(tmp_path: Path) -> None:
    from PIL import Image

    render([Panel("p", [replicas()])], tmp_path / "c.png", title="t")
    image = Image.open(tmp_path / "c.png").convert("RGB")
    assert image.size == (1500, 555)
    colours = {c for _, c in image.getcolors(maxcolors=1 << 20) or []}
    assert (0x1F, 0x5F, 0xA8) in colours  # the replicas line


def test_the_same_chart_is_the_same_bytes(tmp_path: Path) -> None:
    for name in ("a.svg", "b.svg"):
        render([Panel("p", [replicas()])], tmp_path / name, title="t")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


@pytest.mark.parametrize("name", ["c.pdf", "c", "c.svg.txt"])
def test_only_svg_and_png(tmp_path: Path, name: str) -> None:
    with pytest.raises(ChartError, match="written as .svg or .png"):
        render([Panel("p", [replicas()])], tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "c.png").mkdir()
    with pytest.raises(ChartError, match="c.png: is a directory; name the chart's file"):
        render([Panel("p", [replicas()])], tmp_path / "c.png")
    assert [p.name for p in tmp_path.iterdir()] == ["c.png"]

    def refused(src: object, dst: object) -> None:  # the rename into place fails (EBUSY)
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(ChartError, match="d.png: cannot be written: Device or resource busy"):
        render([Panel("p", [replicas()])], tmp_path / "d.png")
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["c.png"]  # no temporary file left
    with pytest.raises(ChartError, match="not a directory"):
        render([Panel("p", [replicas()])], tmp_path / "missing" / "c.png")


def test_missing_matplotlib_is_a_clear_error(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ChartError, match=r"pip install 'gitscale\[charts\]'"):
        render([Panel("p", [replicas()])], tmp_path / "c.png")


@pytest.mark.parametrize("kwargs, message", [
    pytest.param({"times": [T0], "values": [1, 2]}, "1 times but 2 values", id="lengths"),
    pytest.param({"times": [datetime(2026, 1, 1)], "values": [1]}, "UTC offset", id="naive"),
    pytest.param({"times": [T0], "values": [1], "style": "wavy"}, "style", id="style"),
])
def test_series_are_checked(kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        Series("s", **kwargs)


def test_matplotlib_is_imported_only_to_draw() -> None:
    import subprocess

    code = ("import sys, gitscale.cli, gitscale.charts.render, gitscale.charts.history, "
            "gitscale.commands.history; sys.exit('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_note_never_covers_the_first_panel_title() -> None:
    note = "zoomed on the busiest stretch, 08:41–09:48: 24 of 25 commits (--since/--until ...)"
    short = build_figure([Panel("gpu  (9 scaling commits)", [replicas()])], note=note)
    assert short.axes[0].get_title(loc="right") == note
    name = "linux-x64-" + "large-" * 10 + " (23 scaling commits)"
    long = build_figure([Panel(name, [replicas()]), Panel("gpu", [replicas()])], note=note)
    assert long.axes[0].get_title(loc="right") == ""
    assert long.axes[-1].get_xlabel() == f"time (UTC)\n{note}"
    assert texts_outside(long) == []
