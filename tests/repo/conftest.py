"""``remote``: a bare config repo with one set (``linux``, replicas 1) and a demand file of 3
queued jobs, for the tests of what a pass does with its repo."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, make_repo, simple_config


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    return tmp_path / "remote.git"
