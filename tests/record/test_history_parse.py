"""`history` reads what it read before its fast path: the same rows as the former reader
(git's own date formatting, its anchored grep, every trailer through the lenient parser) on
odd commits, and the same JSON and table text as the former writers."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.commands.history_output import history_lines, json_lines
from gitscale.record.commitmsg import SetLine, body_details, format_message, parse_trailer
from gitscale.repo.git import Git
from gitscale.runnerset_api import JOB_LIMIT
from gitscale.record.history import _RECORD, Entry, iter_history, parse_block, parse_record, \
    read_history, set_trailers, utc_text

SHA = "0123456789abcdef0123456789abcdef01234567"


def reference_rows(records: str, only: str | None = None) -> list[Entry]:
    """The former reader, over ``%H%x1f%cd%x1f%B%x1e`` records (the date formatted by git)."""
    entries = []
    for record in records.split("\x1e"):
        fields = record.strip("\n").split("\x1f")
        if len(fields) != 3:
            continue
        sha, when, body = fields
        details = body_details(body)
        for value in set_trailers(body):
            line = parse_trailer(value, "")
            if line is None or (only and line.name != only):
                continue
            entries.append(Entry(sha, when, line.name, line.previous, line.replicas, line.patch,
                                 line.queued, line.running, line.reason,
                                 details.get(line.name, "")))
    return entries


def reference_log(repo: Path) -> str:
    """The former `git log`: git formats the date and greps for the anchored key."""
    return subprocess.run(
        ["git", "log", "--format=%H%x1f%cd%x1f%B%x1e", "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
         "--grep=^Gitscale-Set: "], cwd=repo, check=True, capture_output=True, text=True,
        errors="replace", env={**os.environ, "TZ": "UTC", "LC_ALL": "C"}).stdout


def commit(repo: Path, message: bytes, date: str, parents: list[str],
           encoding: str | None = None) -> str:
    """A commit of the empty tree with exactly ``message`` (commit-tree keeps it verbatim)."""
    env = {**os.environ, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": "@1 +0000",
           "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.invalid",
           "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.invalid"}
    config = ["-c", f"i18n.commitEncoding={encoding}"] if encoding else []
    tree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    argv = ["git", *config, "commit-tree", tree, *[a for p in parents for a in ("-p", p)]]
    return subprocess.run(argv, cwd=repo, input=message, env=env, check=True,
                          capture_output=True).stdout.decode().strip()


WRITTEN = format_message([
    SetLine("linux-x64", 5, 3, 12, 3, 1, "scale-up", "demand 4 (queued 3, running 1)"),
    SetLine("gpu", 0, 2, 0, 0, 0, "scale-down", "demand 0"),
    SetLine("ünïcode-set", 2, None, None, None, None, "first-write", "déjà vu ✓"),
], "f" * 40, {"queued": 2})
ODD_MESSAGES = [
    WRITTEN,
    "a human commit\n\nno trailers here\n",
    "mentions Gitscale-Set: linux replicas=9 mid-line only\n\nSigned-off-by: x\n",
    # a trailer in another case, and the key only inside a line: not a scaling commit
    "mentions Gitscale-Set: here\n\ngitscale-set: lower replicas=1 previous=- patch=- "
    "queued=- running=- reason=r\n",
    # trailers in the body, then a last paragraph without them
    "gitscale: x\n\nGitscale-Set: linux replicas=1 previous=- patch=- queued=- running=- "
    "reason=a\n\nReviewed-by: someone\n",
    # the key in other cases and spacings, in the last paragraph
    "subject\n\n- linux: one\n- linux: two\n\ngitscale-set: linux replicas=4 previous=3 "
    "patch=- queued=- running=- reason=scale-up\nGitscale-Set: gpu replicas=1 previous=- "
    "patch=- queued=- running=- reason=x\n  GITSCALE-SET  :\tarm replicas=2 previous=1 patch=- "
    "queued=- running=- reason=y \t\n",
    # a value continued on indented lines (as git folds trailers)
    "subject\n\nGitscale-Set: linux replicas=3\n previous=2 patch=1\n\tqueued=1 running=1 "
    "reason=scale-up\nGitscale-Base: abc\n",
    # the lenient forms: fields in another order, extra fields, missing ones, junk
    "subject\n\nGitscale-Set: linux reason=drain replicas=0 extra=1\nGitscale-Set: gpu "
    "replicas=x\nGitscale-Set: replicas=1\nGitscale-Set:\nGitscale-Set: big replicas="
    "1234567890123456789 previous=-\n",
    # CRLF line endings and a detail with a carriage return
    "gitscale: crlf\r\n\r\n- linux: from windows\r\n\r\nGitscale-Set: linux replicas=2 "
    "previous=1 patch=0 queued=1 running=0 reason=scale-up\r\n",
    "gitscale: x\n\n- linux: detail\r\n\nGitscale-Set: linux replicas=2 previous=1 patch=0 "
    "queued=1 running=0 reason=scale-up\n",
    # non-breaking and other Unicode spaces around the value
    "s\n\nGitscale-Set: \u00a0linux replicas=2 previous=1 patch=0 queued=1 running=0 "
    "reason=scale-up\u2003\n",
    # the field separator inside a message: dropped by both readers
    "s\n\nGitscale-Set: linux\x1f replicas=2 previous=1 patch=0 queued=1 running=0 reason=r\n",
    "s\n\nGitscale-Set: only-line replicas=7 previous=- patch=- queued=- running=- reason=q",
]
DATES = ["@0 +0000", "@1 +0530", "@253402300799 +0000", "@253402300800 +0000",
         "@999999999999999999 +0000", "@1795388400 -0800"]


@pytest.fixture(scope="module")
def odd_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Odd commits on two branches merged three times, dates out of order, one in Latin-1,
    and scaling commits at the edges of what a date can be."""
    repo = tmp_path_factory.mktemp("odd")
    subprocess.run(["git", "init", "-q", "--initial-branch=main", str(repo)], check=True)
    main = [commit(repo, b"root\n", "@1795380000 +0000", [])]
    side = list(main)
    for number, message in enumerate(ODD_MESSAGES):
        date = f"@{1795388400 + number * 7919 % 5000} {'+0530' if number % 2 else '+0000'}"
        line = side if number % 3 == 0 else main
        line.append(commit(repo, message.encode(), date, [line[-1]]))
        if number in (4, 9, len(ODD_MESSAGES) - 1):  # a merge: its trailers, both parents
            merge = commit(repo, WRITTEN.encode(), "@1795388500 +0000", [main[-1], side[-1]])
            main.append(merge)
            side.append(merge)
    for number, date in enumerate(DATES):
        message = f"gitscale: d\n\nGitscale-Set: dated-{number} replicas=1 previous=- " \
                  "patch=- queued=- running=- reason=r\n"
        main.append(commit(repo, message.encode(), date, [main[-1]]))
    latin = ("gitscale: café\n\n- café: crème\n\nGitscale-Set: café replicas=1 previous=- "
             "patch=- queued=- running=- reason=first-write\n")
    main.append(commit(repo, latin.encode("latin-1"), "@1795388600 +0000", [main[-1]],
                       encoding="ISO-8859-1"))
    subprocess.run(["git", "update-ref", "refs/heads/main", main[-1]], cwd=repo, check=True)
    return repo


def test_odd_commits_read_as_the_former_reader_read_them(odd_repo: Path) -> None:
    expected = reference_rows(reference_log(odd_repo))
    assert read_history(Git(odd_repo)) == expected
    names = {e.set for e in expected}
    assert {"linux", "gpu", "ünïcode-set", "café", "only-line"} <= names
    assert "lower" not in names
    assert [e.time for e in expected if e.set.startswith("dated-")] == [
        "2026-11-22T23:00:00Z", "1970-01-01T00:00:00Z",  # past the C library's years: 0
        "10000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "1970-01-01T00:00:01Z",
        "1970-01-01T00:00:00Z"]
    for only in ("linux", "café", "nothing"):
        assert list(iter_history(Git(odd_repo), only=only)) == \
            reference_rows(reference_log(odd_repo), only)
    assert list(iter_history(Git(odd_repo), details=False)) == \
        [e._replace(detail="") for e in expected]


def test_the_table_and_json_are_the_former_text(odd_repo: Path) -> None:
    entries = read_history(Git(odd_repo))
    assert "\n".join(json_lines(entries)) == json.dumps([e._asdict() for e in entries], indent=2)
    assert "\n".join(json_lines([])) == "[]"
    rows = [["TIME", "COMMIT", "SET", "OLD→NEW", "PATCH", "DEMAND", "REASON"]] + [
        [e.time, e.commit[:10], e.set, f"{'-' if e.previous is None else e.previous}→"
         f"{e.replicas}", "-" if e.patch is None else str(e.patch),
         "-" if e.queued is None else f"{e.queued}q+{e.running}r", e.reason] for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    assert list(history_lines(entries)) == [
        "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]


KEYS = st.sampled_from(["Gitscale-Set: ", "gitscale-set:", " Gitscale-Set :", "Gitscale-Base: ",
                        "Other: ", "- ", "  ", "\t", ""])
VALUES = st.one_of(
    st.builds(lambda name, nums, reason: f"{name} replicas={nums[0]} previous={nums[1]} "
              f"patch={nums[2]} queued={nums[3]} running={nums[4]} reason={reason}",
              st.from_regex(r"[a-zé0-9-]{1,8}", fullmatch=True),
              st.lists(st.one_of(st.just("-"), st.integers(0, 10**19).map(str)),
                       min_size=5, max_size=5),
              st.sampled_from(["scale-up", "x", "é"])),
    st.text(st.characters(blacklist_characters="\x1e"), max_size=30))
LINES = st.builds(lambda key, value, end: key + value + end, KEYS, VALUES,
                  st.sampled_from(["", " ", "\r", "\t "]))


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINES, max_size=12), breaks=st.lists(st.booleans(), max_size=12),
       seconds=st.integers(0, 2**36))
def test_any_message_reads_as_the_former_reader_read_it(lines: list[str], breaks: list[bool],
                                                        seconds: int) -> None:
    message = "gitscale: s\n"
    for line, blank in zip(lines, breaks + [False] * len(lines)):
        message += ("\n" if blank else "") + line + "\n"
    message += "Gitscale-Set: last replicas=1 previous=- patch=- queued=- running=- reason=r\n"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    assert utc_text(seconds) == when
    expected = reference_rows(f"{SHA}\x1f{when}\x1f{message}\x1e")
    assert parse_record(f"\n{SHA}\x1f{seconds}\x1f{message}\n") == expected
    assert parse_record(f"{SHA}\x1f{seconds}\x1f{message}", details=False) == \
        [e._replace(detail="") for e in expected]


SET_LINES = st.builds(
    SetLine, st.from_regex(r"[a-zé0-9-]{1,8}", fullmatch=True), st.integers(0, 10**18),
    *[st.one_of(st.none(), st.integers(0, 10**18)) for _ in range(4)],
    st.sampled_from(["scale-up", "quiet-reset", "é"]),
    st.text(st.characters(blacklist_characters="\x1e\x1f\n"), max_size=20))
# what a person or another tool may do to a message gitscale wrote, at the edges of the one-match
# reading: each must read as the general reader reads it (or be read by it)
EDITS = st.sampled_from([
    ("", ""), ("\nGitscale-Base: ", "\ngitscale-set: x replicas=1 previous=- patch=- "
                                    "queued=- running=- reason=r\nGitscale-Base: "),
    ("\n", "\r\n"), ("\n\n", "\n\n\n"), ("\nGitscale-Base:", "\n Gitscale-Base:"),
    ("\nGitscale-Base:", "\nSigned-off-by: a\nGitscale-Base:"), (" reason=", "  reason="),
    ("\nGitscale-Base: ", "\n\nGitscale-Base: "), ("Gitscale-Set: ", "Gitscale-Set:  "),
    ("\nGitscale-Set: ", "\n\tGitscale-Set: "), ("\n\nGitscale-Set: ", "\n\nGitscale-set: "),
    ("\n- ", "\n\x1f- "), ("\n- ", "\n\x1e- "), ("previous=-", "previous=007"),
    ("Gitscale-Base: ", "Gitscale-Base: \u00a0"), ("\nGitscale-Base", "\r\nGitscale-Base"),
    ("\nGitscale-Base", " \nGitscale-Base"), ("\nGitscale-Base", "\u2003\nGitscale-Base"),
    ("\nGitscale-Base: ", "\nGitscale-Base:\n ")])


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(st.tuples(st.lists(SET_LINES, min_size=1, max_size=3),
                                   st.sampled_from([None, {"queued": 2}]), EDITS,
                                   st.sampled_from(["", "\n", "\n\n", " folded\n", "Gitscale-Set: "
                                                    "tail replicas=1 previous=- patch=- "
                                                    "queued=- running=- reason=t\n"])),
                        max_size=4),
       seconds=st.integers(0, 2**36), only=st.sampled_from([None, "a", "é"]),
       sha=st.sampled_from([SHA, SHA + "89abcdef" * 3, SHA[:39]]))
def test_a_block_of_written_commits_reads_as_the_former_reader_read_them(
        messages: list[tuple[list[SetLine], dict[str, int] | None, tuple[str, str], str]],
        seconds: int, only: str | None, sha: str) -> None:
    """``parse_block`` over a block of ``git log`` records (gitscale's commits, some edited)
    reads what the former reader read record by record, and gitscale's own in one match."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    block = reference = ""
    for lines, events, (old, new), end in messages:
        written = format_message(lines, "f" * 40, events)
        message = written.replace(old, new, 1) + end
        block += f"{sha}\x1f{seconds}\x1f{message}\x1e\n"
        if message.startswith("Gitscale-Set: ") or "\nGitscale-Set: " in message:
            reference += f"{sha}\x1f{when}\x1f{message}\x1e\n"  # the former --grep=^…
        counts = [n for line in lines for n in (line.replicas, line.previous, line.patch,
                                                line.queued, line.running) if n is not None]
        jobs = [n for line in lines for n in (line.queued, line.running) if n is not None]
        if max(counts) < 10**18 and max(jobs, default=0) <= JOB_LIMIT and len(sha) != 39:
            # gitscale's own take the one match
            assert _RECORD.fullmatch(f"{sha}\x1f{seconds}\x1f{written}\x1e")
    for details in (True, False):
        expected = [e if details else e._replace(detail="")
                    for e in reference_rows(reference, only)]
        assert list(parse_block(block, only=only, details=details)) == expected
        assert [e for piece in block.split("\x1e")
                for e in parse_record(piece, only=only, details=details)] == expected


TEXT = st.text(max_size=12)
COUNTS = st.one_of(st.none(), st.integers(0, 10**18))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(Entry, TEXT, TEXT, TEXT, COUNTS, st.integers(0, 10**18), COUNTS,
                          COUNTS, COUNTS, TEXT, TEXT), max_size=4))
def test_json_lines_are_json_dumps(entries: list[Entry]) -> None:
    assert "\n".join(json_lines(entries)) == json.dumps([e._asdict() for e in entries], indent=2)
