"""The reservations file `gitscale serve` rewrites at each window: its tombstones (jobs completed
lately) grouped by batch, the per-job form of the first builds still read, bad entries refused."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gitscale.core.reservations import Book, Reservation
from gitscale.webhooks.reservations_file import ReservationsError, read_state, render

NOW = datetime(2026, 11, 27, 5, 0, tzinfo=timezone.utc)
REL = ".gitscale/reservations.yaml"


def state_of(tmp_path: Path, text: str) -> dict[str, Book]:
    (tmp_path / ".gitscale").mkdir(exist_ok=True)
    (tmp_path / REL).write_text(text)
    return read_state(tmp_path, REL).books


def test_tombstones_are_one_entry_per_batch_and_read_back_as_written(tmp_path: Path) -> None:
    # 10 completions a second for 10 minutes, a batch every 10 s, beside 50 reservations
    completed = tuple((10_000_000_000 + i, NOW + timedelta(seconds=600 - (i // 100) * 10))
                      for i in range(6000))
    reservations = tuple(Reservation(20_000_000_000 + i, i % 2 == 0, NOW,
                                     NOW + timedelta(minutes=10)) for i in range(50))
    text = render({"linux": Book(reservations, completed)}, ["linux"])
    assert text.count("until:") == 60  # one per batch, not one per job (6,000 lines before)
    assert len(text.splitlines()) < 900 and len(text) < 100_000
    assert all(line == line.rstrip() for line in text.splitlines())  # no trailing blanks
    book = state_of(tmp_path, text)["linux"]
    assert sorted(book.completed) == sorted(completed)
    assert book.reservations == reservations
    assert render(state_of(tmp_path, text), ["linux"]) == text  # a fixed point


def test_the_per_job_form_of_the_first_builds_is_still_read(tmp_path: Path) -> None:
    old = ("served: [linux]\nsets:\n  linux:\n    reservations: []\n    completed:\n"
           "    - {job: 7, until: '2026-11-27T05:10:00Z'}\n"
           "    - {job: 8, until: '2026-11-27T05:10:00Z'}\n"
           "    - {job: 9, until: '2026-11-27T05:10:10Z'}\n")
    book = state_of(tmp_path, old)["linux"]
    ten = NOW + timedelta(minutes=10)
    assert sorted(book.completed) == [(7, ten), (8, ten), (9, ten + timedelta(seconds=10))]
    assert "    - until: '2026-11-27T05:10:00Z'\n      jobs: [7, 8]\n" in render(
        {"linux": book}, ["linux"])


@pytest.mark.parametrize(("completed", "words"), [
    pytest.param("[{until: '2026-11-27T05:10:00Z', jobs: 7}]", "`jobs` of a completed entry "
                 "must be a list", id="jobs-not-a-list"),
    pytest.param("[{until: '2026-11-27T05:10:00Z', jobs: [0]}]", "job 0 is not a GitHub job id",
                 id="job-zero"),
    pytest.param("[{jobs: [7]}]", "'until'", id="no-until"),
    pytest.param("[{until: '2026-11-27T05:10:00', jobs: [7]}]", "no UTC offset",
                 id="naive-time"),
])
def test_a_bad_completed_entry_is_refused_naming_the_file(tmp_path: Path, completed: str,
                                                           words: str) -> None:
    text = f"served: [linux]\nsets:\n  linux:\n    reservations: []\n    completed: {completed}\n"
    with pytest.raises(ReservationsError) as caught:
        state_of(tmp_path, text)
    said = str(caught.value)
    # the line of the `completed:` that holds the entry
    assert said.startswith(f"{REL}:5: not a reservations file gitscale wrote (") and words in said
