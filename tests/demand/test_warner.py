"""A source's warnings in a loop (`run`, `serve`'s resync): once, then every 30 minutes while
they come back — a refused jobIds token or a flooded repo said every 30 s pass filled the log."""
from __future__ import annotations

from gitscale.demand import REMIND, warner


def test_a_loop_says_a_warning_once_then_every_half_hour() -> None:
    lines: list[str] = []
    said: dict[str, tuple[float, float]] = {}
    now = [1000.0]
    warn = warner(lines.append, said, clock=lambda: now[0])
    warn("github: acme/busy: GitHub counts 1,003 queued runs and lists 1,000")
    now[0] += 30
    warn("github: acme/busy: GitHub counts 1,020 queued runs and lists 1,000")  # same words
    warn("buildkite: queue deploy (jobIds): job ids not used this pass")  # other words
    now[0] += REMIND
    warn("github: acme/busy: GitHub counts 1,100 queued runs and lists 1,000")
    assert lines == [
        "warning: github: acme/busy: GitHub counts 1,003 queued runs and lists 1,000 "
        "(said again every 30 min while it lasts)",
        "warning: buildkite: queue deploy (jobIds): job ids not used this pass "
        "(said again every 30 min while it lasts)",
        "warning: github: acme/busy: GitHub counts 1,100 queued runs and lists 1,000 "
        "(still, 30 min on)",
    ]


def test_a_warning_that_comes_back_after_it_ended_is_said_as_new() -> None:
    """Not seen for 30 minutes, a warning has ended: when it comes back (the next morning's
    flood) it is said at once as a first time, not as still lasting."""
    lines: list[str] = []
    now = [1000.0]
    warn = warner(lines.append, {}, clock=lambda: now[0])
    warn("github: acme/busy: GitHub counts 1,003 queued runs and lists 1,000")
    now[0] += 60
    warn("github: acme/busy: GitHub counts 1,010 queued runs and lists 1,000")  # unsaid
    now[0] += 20 * 3600  # passes without it (the flood is over), then back
    warn("github: acme/busy: GitHub counts 1,500 queued runs and lists 1,000")
    now[0] += REMIND - 1  # seen again within the half hour: the same episode, unsaid
    warn("github: acme/busy: GitHub counts 1,400 queued runs and lists 1,000")
    assert lines == [
        "warning: github: acme/busy: GitHub counts 1,003 queued runs and lists 1,000 "
        "(said again every 30 min while it lasts)",
        "warning: github: acme/busy: GitHub counts 1,500 queued runs and lists 1,000 "
        "(said again every 30 min while it lasts)",
    ]


def test_without_a_memory_every_warning_is_said() -> None:
    """A CLI run (or a caller that keeps nothing) says each one: it runs once."""
    lines: list[str] = []
    warn = warner(lines.append)
    warn("a")
    warn("a")
    assert lines == ["warning: a", "warning: a"]


def test_warnings_of_names_that_differ_in_a_digit_are_each_said() -> None:
    """Only the counts make two warnings the same: repos `acme/svc1` and `acme/svc2`, queues
    `deploy-1` and `deploy-2` are different warnings, each said in its first pass."""
    lines: list[str] = []
    warn = warner(lines.append, {}, clock=lambda: 0.0)
    for repo in ("acme/svc1", "acme/svc2", "acme/svc-1", "acme/svc-2"):
        warn(f"github: {repo}: GitHub counts 1,003 queued runs and lists 1,000")
    for queue in ("deploy-1", "deploy-2"):
        warn(f"buildkite: queue {queue} (jobIds): job ids not used this pass")
    assert len(lines) == 6, lines
