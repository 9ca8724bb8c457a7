"""`gitscale run` (a subprocess) through a token rotation: the fake GitHub on loopback takes a
new token, the token file is rewritten between passes, and the loop's next pass uses it —
no restart, no `401` pass, never the token in the log."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.commands.test_run_loop import wait_for
from tests.demand.fake_github import FakeGitHub
from tests.helpers import RUNNERSET, git, make_repo

OLD = "ghp_OldLoopT0ken0123456789abcdefABCDEF"
NEW = "ghp_NewLoopT0ken0123456789abcdefABCDEF"


def test_a_running_loop_takes_the_rotated_token(tmp_path: Path) -> None:
    token = tmp_path / "src-token"
    token.write_text(OLD + "\n")
    with FakeGitHub(token=OLD) as gh:
        repo = gh.add_repo("acme", "app")
        gh.add_run(repo, "queued", [("queued", ["self-hosted", "linux"])])
        make_repo(tmp_path, {
            "gitscale.yaml": (
                "runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                "    source: {github: {org: acme, labels: [self-hosted, linux], "
                f"apiUrl: '{gh.url}', token: {{file: {token}}}}}}}\n"
                "    policy: {minReplicas: 0, maxReplicas: 20, scaleDownDelay: 0s}\n"),
            "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0)})
        remote = tmp_path / "remote.git"
        log = tmp_path / "run.log"
        with open(log, "w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gitscale", "run", "--repo", str(remote),
                 "--interval", "1s"], stdout=subprocess.DEVNULL, stderr=err,
                env={**os.environ, "GITSCALE_CACHE_DIR": str(tmp_path / "cache")})
        try:
            assert wait_for(lambda: "replicas: 1" in git(remote, "show", "main:sets/linux.yaml"))
            # rotated at GitHub (the old token refused from now on), then in the file
            gh.tokens = {NEW}
            (tmp_path / "next").write_text(NEW + "\n")
            os.replace(tmp_path / "next", token)
            gh.add_run(repo, "queued", [("queued", ["self-hosted", "linux"])])
            assert wait_for(lambda: "replicas: 2" in git(remote, "show", "main:sets/linux.yaml"))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert text.count(f"github token: {token} changed: the new value is used from now on") == 1
    # (not a bare "401": the log names pytest's temporary folders, pytest-3401 among them)
    assert "answered 401" not in text and "left untouched" not in text
    assert OLD not in text and NEW not in text
