"""`history --chart`: panels per set, the window worth drawing, and the command end to end."""
from __future__ import annotations

import math
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gitscale.record.history import Entry
from gitscale.charts.history import busiest_stretch, choose_window, history_panels
from tests.helpers import RUNNERSET, make_repo, run, simple_config

EVENING = datetime(2026, 11, 22, 18, 40, tzinfo=timezone.utc)
MORNING = datetime(2026, 11, 23, 8, 40, tzinfo=timezone.utc)


def minutes(base: datetime, *offsets: int) -> list[datetime]:
    return [base + timedelta(minutes=m) for m in offsets]


@pytest.mark.parametrize("times, expected", [
    pytest.param(minutes(EVENING, 0) + minutes(MORNING, *range(0, 60, 3)),
                 (MORNING, MORNING + timedelta(minutes=57)), id="evening-then-busy-morning"),
    pytest.param(minutes(MORNING, *range(0, 600, 30)), None, id="evenly-spread"),
    pytest.param(minutes(MORNING, 0, 5, 600, 605), (MORNING + timedelta(minutes=600),
                                                   MORNING + timedelta(minutes=605)),
                 id="a-tie-goes-to-the-later"),
    pytest.param(minutes(MORNING, 0, 600), None, id="too-few-commits"),
    pytest.param(minutes(MORNING, 0, 300, 400, 500, 600), None, id="busy-part-already-wide"),
    pytest.param(minutes(MORNING, 0, 300, 600), None, id="single-commits-are-no-stretch"),
])
def test_busiest_stretch(times, expected) -> None:  # type: ignore[no-untyped-def]
    assert busiest_stretch(times) == expected


def entry(when: datetime, name: str = "linux", replicas: int = 1, queued: int | None = 0,
          running: int | None = 0, commit: str | None = None) -> Entry:
    return Entry(commit or f"{when:%d%H%M}{name}", when.strftime("%Y-%m-%dT%H:%M:%SZ"), name,
                 None, replicas, 1, queued, running, "scale-up", "")


def test_the_default_window_zooms_on_the_busy_morning_and_says_so() -> None:
    entries = [entry(EVENING, commit="e")] + [entry(t, commit=f"m{i}") for i, t in
                                              enumerate(minutes(MORNING, *range(0, 60, 3)))]
    window = choose_window(entries, None, None, timezone.utc)
    assert window.start == MORNING - timedelta(minutes=5)
    assert window.end == MORNING + timedelta(minutes=62)
    assert window.note is not None and "08:40–09:37: 20 of 21 commits" in window.note
    assert "--since/--until" in window.note


def test_no_zoom_and_no_note_when_the_zoomed_window_would_hold_every_commit() -> None:
    """Two passes a second apart (the demo, then the quickstart's reconcile): the later one is
    the "busiest stretch", but the minutes drawn around it hold the earlier one too; the note
    said "1 of 2 commits" over a chart that drew both."""
    second = MORNING + timedelta(seconds=1)
    entries = [entry(MORNING, "gpu", commit="a"), entry(MORNING, "linux", commit="a"),
               entry(second, "gpu", commit="b"), entry(second, "linux", commit="b")]
    window = choose_window(entries, None, None, timezone.utc)
    assert window.note is None
    assert window.start == MORNING - timedelta(minutes=5)
    assert window.end == second + timedelta(minutes=5)


def test_since_and_until_are_the_window_and_hide_nothing_unasked() -> None:
    entries = [entry(EVENING), entry(MORNING), entry(MORNING + timedelta(minutes=3)),
               entry(MORNING + timedelta(minutes=9))]
    window = choose_window(entries, EVENING, None, timezone.utc)
    assert (window.start, window.note) == (EVENING, None)
    assert window.end > MORNING + timedelta(minutes=9)
    until = MORNING + timedelta(minutes=4)
    assert choose_window(entries, None, until, timezone.utc).end == until


def test_one_panel_per_set_with_replicas_demand_and_running() -> None:
    entries = [entry(MORNING, "linux", 3, 2, 1), entry(MORNING, "gpu", 1, 1, 0),
               entry(MORNING + timedelta(minutes=5), "linux", 5, None, None)]
    panels = history_panels(entries)
    assert [p.title for p in panels] == ["gpu  (1 scaling commit)", "linux  (2 scaling commits)"]
    replicas, demand, running = panels[1].series
    assert list(replicas.values) == [3, 5] and replicas.step and replicas.style == "solid"
    assert demand.values[0] == 3 and math.isnan(demand.values[1]) and demand.style == "dashed"
    assert running.values[0] == 1 and running.style == "area"


def test_commits_of_one_second_are_drawn_in_the_order_they_were_made() -> None:
    """Two reconciles that raced land in one second: git gives the newest first, and a sort by
    time alone kept it first, so the line ended at the older count (7, for a set at 8)."""
    second = MORNING + timedelta(seconds=6)
    newest_first = [entry(second, "gpu", 8, commit="c"), entry(second, "gpu", 7, commit="b"),
                    entry(MORNING, "gpu", 6, commit="a")]
    (panel,) = history_panels(newest_first)
    replicas = panel.series[0]
    assert list(replicas.values) == [6, 7, 8]
    assert list(replicas.times) == [MORNING, second, second]


# --- the command, on a real repo with real scaling commits -----------------------------------

def scaled_repo(tmp_path: Path, capsys) -> Path:  # type: ignore[no-untyped-def]
    """Two sets: one commit in the evening, a busy morning after it."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 1, maxReplicas: 20, buffer: 1}",
                                        "gpu": "{minReplicas: 0, maxReplicas: 4}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
    })
    plan = [(EVENING, 0, 0), (MORNING, 2, 0), (MORNING + timedelta(minutes=4), 6, 1),
            (MORNING + timedelta(minutes=9), 12, 2), (MORNING + timedelta(minutes=20), 3, 0)]
    for i, (when, linux, gpu) in enumerate(plan):
        demand = tmp_path / f"demand-{i}.yaml"
        demand.write_text(f"linux: {{queued: {linux}, running: 0}}\n"
                          f"gpu: {{queued: {gpu}, running: 0}}\n")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                           "--now", when.strftime("%Y-%m-%dT%H:%M:%SZ"))
        assert code == 0, err
    return checkout


def svg_texts(path: Path) -> list[str]:
    """matplotlib writes each text of an SVG as paths preceded by the text in a comment."""
    return re.findall(r"<!-- (.*?) -->", path.read_text())


def test_history_chart_end_to_end(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = scaled_repo(tmp_path, capsys)
    chart = tmp_path / "history.svg"
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--chart", str(chart))
    assert code == 0, err
    assert out.count("linux") == 5 and "TIME" in out  # the table is printed as well
    svg = chart.read_text()
    assert svg.count('<g id="axes_') == 2 and svg.count('<g id="legend_') == 1
    texts = svg_texts(chart)
    assert "gpu  (4 scaling commits)" in texts and "linux  (5 scaling commits)" in texts
    assert "replicas (runners)" in texts and "demand (queued + running jobs)" in texts
    assert any(t.startswith("zoomed on the busiest stretch, 08:40–09:00: 4 of 5 commits")
               for t in texts)
    assert "time (UTC)" in texts and "08:40" in texts


def test_set_since_until_and_tz(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = scaled_repo(tmp_path, capsys)
    chart = tmp_path / "linux.svg"
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "linux", "--since",
                         "2026-11-23T08:42:00Z", "--until", "2026-11-23T08:50:00Z", "--tz",
                         "Europe/Berlin", "--chart", str(chart))
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == [
        "2026-11-23T09:49:00+01:00", "2026-11-23T09:44:00+01:00"]
    svg = chart.read_text()
    assert svg.count('<g id="axes_') == 1
    texts = svg_texts(chart)
    assert "time (Europe/Berlin)" in texts and "09:42" in " ".join(texts)
    assert not any(t.startswith("zoomed") for t in texts)  # the user chose the window


@pytest.mark.parametrize("args, message", [
    pytest.param(["--chart", "{tmp}/c.pdf"], "written as .svg or .png", id="suffix"),
    pytest.param(["--chart", "{tmp}/no/c.png"], "not a directory", id="no-directory"),
    pytest.param(["--chart", "{tmp}/c.png", "--set", "nope"], "no scaling commits of set 'nope'",
                 id="nothing-to-draw"),
    pytest.param(["--tz", "Mars/Olympus"], "--tz: 'Mars/Olympus' is not utc, local", id="tz"),
    pytest.param(["--since", "2026-11-23T09:00:00Z", "--until", "2026-11-23T08:00:00Z"],
                 "is after --until", id="since-after-until"),
    pytest.param(["--until", "9am"], "--until: '9am' is not an RFC 3339 time", id="until"),
])
def test_bad_options_are_clear_errors(tmp_path, capsys, args, message):  # type: ignore[no-untyped-def]
    # a set of the config that never scaled ("nope": nothing to draw, not a typo)
    checkout = make_repo(tmp_path, {"gitscale.yaml": simple_config({"nope": "default"})},
                         bare_remote=False)
    code, out, err = run(capsys, "history", "--repo", str(checkout),
                         *[a.format(tmp=tmp_path) for a in args])
    assert code == 1 and message in err and "Traceback" not in out + err, err
    assert not list(tmp_path.glob("c.*")) and out == ""


def test_without_matplotlib_history_says_how_to_get_it(tmp_path, capsys, monkeypatch):  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {"gitscale.yaml": simple_config({})}, bare_remote=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` sees then
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--chart",
                         str(tmp_path / "c.png"))
    assert code == 1 and "pip install 'gitscale[charts]'" in err and "Traceback" not in err
    assert not (tmp_path / "c.png").exists()
