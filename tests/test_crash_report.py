"""A crash report names what a bug report needs (issue 10, item 8)."""
from __future__ import annotations

import platform
import subprocess

from gitscale import __version__
from gitscale.crash import versions as _versions


def test_crash_report_header_names_gitscale_git_and_python() -> None:
    header = _versions().splitlines()
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    assert header[0] == f"gitscale {__version__}"
    assert header[1] == git
    assert header[2].startswith(f"Python {platform.python_version()} ")
