"""Every commit message gitscale writes parses back to what it wrote (issue 10, item 8)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.record.commitmsg import SetLine, body_details, format_message, parse_trailer
from gitscale.repo.git import Git
from gitscale.record.history import parse_record, read_history
from gitscale.runnerset_api import JOB_LIMIT

NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
COUNT = st.integers(0, 2**31 - 1)
MAYBE = st.one_of(st.none(), COUNT)
JOBS = st.one_of(st.none(), st.integers(0, JOB_LIMIT))  # what a source may report
REASONS = st.sampled_from(["first-write", "scale-up", "scale-down", "reaffirm", "quiet-reset",
                           "drain", "resume"])
DETAIL = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=80)


@st.composite
def set_lines(draw: st.DrawFn) -> list[SetLine]:
    names = draw(st.lists(NAMES, min_size=1, max_size=9, unique=True))
    return [SetLine(name, draw(COUNT), draw(MAYBE), draw(MAYBE), draw(JOBS), draw(JOBS),
                    draw(REASONS), draw(DETAIL).strip()) for name in names]


@settings(max_examples=200, deadline=None)
@given(lines=set_lines(), events=st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["queued", "in_progress", "completed"]), st.integers(1, 500), min_size=1)))
def test_message_round_trips_through_the_parser(lines: list[SetLine],
                                                events: dict[str, int] | None) -> None:
    message = format_message(lines, "0" * 40, events)
    paragraphs = message.rstrip("\n").split("\n\n")
    trailers = [t for t in paragraphs[-1].splitlines() if t.startswith("Gitscale-Set: ")]
    details = body_details(message)
    parsed = [parse_trailer(t.removeprefix("Gitscale-Set: "), details.get(t.split()[1], ""))
              for t in trailers]
    assert parsed == lines
    assert paragraphs[0].startswith("gitscale: ") and "\n" not in paragraphs[0]


@settings(max_examples=5, deadline=None)
@given(lines=set_lines())
def test_a_real_commit_round_trips_through_history(tmp_path_factory, lines: list[SetLine]) -> None:  # type: ignore[no-untyped-def]
    repo: Path = tmp_path_factory.mktemp("repo")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-F", "-"], check=True,
                   input=format_message(lines, "0" * 40).encode())
    entries = read_history(Git(repo))
    assert [(e.set, e.replicas, e.previous, e.patch, e.queued, e.running, e.reason, e.detail)
            for e in entries] == [(s.name, s.replicas, s.previous, s.patch, s.queued,
                                   s.running, s.reason, s.detail) for s in lines]


@pytest.mark.parametrize(("files", "subject"), [
    pytest.param([".gitscale/reservations.yaml"], "gitscale: update .gitscale/reservations.yaml",
                 id="a-file"),
    pytest.param([], "gitscale: update files", id="nothing-named"),
])
def test_a_message_with_nothing_to_say_still_has_a_subject(files: list[str],
                                                           subject: str) -> None:
    """No set line, no event, no note: the subject was a bare `gitscale:`."""
    message = format_message([], "abc123", None, [], files)
    assert message.splitlines()[0] == subject


@pytest.mark.parametrize("edit", [
    pytest.param(("queued=1 ", "queued=99999999 "), id="written"),  # read in one match
    pytest.param(("queued=1 ", "queued=99999999  "), id="edited"),  # by the general reader
])
def test_a_count_of_jobs_gitscale_never_writes_reads_as_unknown(
        edit: tuple[str, str]) -> None:
    """A source's count above JOB_LIMIT is refused, so a trailer holding one is not
    gitscale's: its demand reads as unknown (as ``queued=abc`` does), which a forecast and
    `simulate --from-history` skip (the latter made a job per unit: 99,999,999 of them)."""
    lines = [SetLine("linux", 5, 0, 1, 1, 0, "scale-up"),
             SetLine("gpu", 2, 0, 1, JOB_LIMIT, JOB_LIMIT, "scale-up")]
    message = format_message(lines, "0" * 40).replace(*edit)
    entries = parse_record(f"{'a' * 40}\x1f0\x1f{message}")
    assert [(e.set, e.replicas, e.queued, e.running) for e in entries] == [
        ("linux", 5, None, 0), ("gpu", 2, JOB_LIMIT, JOB_LIMIT)]
    assert parse_trailer(f"linux replicas=5 queued={JOB_LIMIT + 1} running=-1") == \
        SetLine("linux", 5, None, None, None, None, "unknown")
