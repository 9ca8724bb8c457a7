"""The CHANGELOG has a release section for the version gitscale says it is, under an
`[Unreleased]` one, and its "Known limits" no longer claim what has since been built."""
from __future__ import annotations

import re

from gitscale import __version__
from tests.ship.shipfiles import ROOT

CHANGELOG = (ROOT / "CHANGELOG.md").read_text()


def sections() -> list[str]:
    return re.findall(r"^## (.+)$", CHANGELOG, flags=re.MULTILINE)


def test_there_is_a_dated_section_for_this_version_below_unreleased() -> None:
    found = sections()
    assert found[0] == "[Unreleased]"
    releases = [s for s in found if s.startswith(f"[{__version__}]")]
    assert len(releases) == 1, found
    assert re.fullmatch(rf"\[{re.escape(__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}", releases[0])
    assert found.index(releases[0]) == 1  # the newest release comes right after Unreleased


def test_known_limits_do_not_deny_what_exists() -> None:
    limits = CHANGELOG[CHANGELOG.index("\n## Known limits"):]
    for claim in ("no finalizer", "No leader election", "`gitscale simulate` is not built",
                  "1,006 API calls"):
        assert claim not in limits, claim
