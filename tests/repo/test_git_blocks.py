"""`Git.blocks`: git's output streamed in whole records, its errors read after."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gitscale.errors import GitError
from gitscale.repo.git import Git

# A git alias that writes 256 KiB to stderr before its stdout: past a pipe's 64 KiB, a reader
# that drained stdout first and stderr only after would wait on git forever.
_NOISY = "!f() { yes xxxx | head -c 262144 >&2; printf 'a;b;c'; exit $1; }; f"


@pytest.fixture
def repo(tmp_path: Path) -> Git:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return Git(tmp_path)


def test_a_git_that_writes_much_to_stderr_still_streams_its_records(repo: Git) -> None:
    blocks = list(repo.blocks("-c", f"alias.noisy={_NOISY}", "noisy", "0", separator=";"))
    assert "".join(blocks) == "a;b;c"
    assert all(block.endswith(";") for block in blocks[:-1])


def test_a_failing_git_raises_with_what_it_said(repo: Git) -> None:
    with pytest.raises(GitError) as raised:
        list(repo.blocks("-c", f"alias.noisy={_NOISY}", "noisy", "3", separator=";"))
    assert "xxxx" in str(raised.value)
