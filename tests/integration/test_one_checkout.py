"""Two gitscale processes writing in one checkout (two overlapping cron runs on one host, a
`run` and a manual `reconcile` in the same directory) take turns, one pass at a time.

They shared the work tree, the index, FETCH_HEAD and the record of a write in progress: the
second run took the first one's edit for the leftovers of a killed run and discarded it, the
first one's `git commit` then found nothing to commit and put back its stale texts, and every
later run refused the checkout ("has uncommitted changes") until someone cleaned it by hand.
Races of many rounds also committed a decision made on one tree on top of another (a
`previous=` that was not the parent's), and failed on `git rev-parse FETCH_HEAD`.

The second run is started from a git hook of the first one's `git add` (gitscale skips
pre-commit hooks, not these): at the worst moment, with the first run's edit on disk and
staged, its commit not yet made.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration import seed
from tests.integration.conftest import CLI_TIMEOUT, GitDaemon, cli_env
from tests.integration.seed import GPU, NOW, RUNNERS

SECOND_RUN = """#!/bin/sh
# Once, while the first run's edit is staged: start a second gitscale in this checkout and
# wait until it is done, or says that it waits for the first one. (It holds none of git's pipes:
# the first run reads this hook's output to its end.)
[ -e '{out}/started' ] && exit 0
git diff --cached --quiet && exit 0
touch '{out}/started'
( '{python}' -m gitscale reconcile --repo '{checkout}' --demand '{demand}' --now '{now}' \\
    > '{out}/stdout' 2> '{out}/stderr'; echo $? > '{out}/code' ) </dev/null >/dev/null 2>&1 &
i=0
while [ $i -lt 300 ]; do
  [ -e '{out}/code' ] && exit 0
  grep -q 'waiting for another gitscale' '{out}/stderr' 2>/dev/null && exit 0
  sleep 0.1; i=$((i + 1))
done
"""


def reconcile(checkout: Path, demand: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitscale", "reconcile", "--repo",
                           str(checkout), "--demand", str(demand), "--now", NOW],
                          env=cli_env(), capture_output=True, text=True, timeout=CLI_TIMEOUT)


def wait_for(path: Path, seconds: float = CLI_TIMEOUT) -> str:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_a_second_run_waits_for_the_first_and_both_land(git_server: GitDaemon,
                                                        tmp_path: Path) -> None:
    bare = git_server.create(seed.FILES)
    checkout = seed.fresh_clone(git_server.url(), tmp_path / "checkout")
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(seed.demand_text((5, 0)))
    second.write_text(seed.demand_text((9, 0), gpu=(1, 0)))
    out = tmp_path / "second-run"
    out.mkdir()
    hook = checkout / ".git" / "hooks" / "post-index-change"
    hook.write_text(SECOND_RUN.format(out=out, python=sys.executable, checkout=checkout,
                                      demand=second, now=NOW))
    hook.chmod(0o755)

    one = reconcile(checkout, first)
    assert one.returncode == 0, one
    assert (out / "started").exists()  # the second run did start in the middle of the first
    assert wait_for(out / "code") == "0", (out / "stdout").read_text() + \
        (out / "stderr").read_text()
    said = (out / "stderr").read_text()
    assert "waiting for another gitscale run in" in said and "(pid " in said, said
    assert "discarded the leftovers" not in (out / "stdout").read_text()

    # the first run's decision landed, then the second one's, made on top of it
    history = seed.commits(bare)
    assert len(history) == 3
    mine, theirs = seed.message(bare, history[1]), seed.message(bare, history[0])
    assert mine.sets["linux-x64"]["replicas"] == "5" and mine.sets["linux-x64"]["patch"] == "8"
    assert theirs.parent == history[1] == theirs.base
    assert theirs.sets["linux-x64"] == {**theirs.sets["linux-x64"], "previous": "5",
                                        "replicas": "9", "patch": "9"}
    assert seed.runner_set(seed.show(bare, "main", RUNNERS), "linux-x64")["spec"][
        "replicas"] == 9
    assert seed.runner_set(seed.show(bare, "main", GPU), "gpu")["spec"]["replicas"] == 1
    # and the checkout is clean, at the remote's head: the next run works in it
    assert seed.git(checkout, "status", "--porcelain") == ""
    assert seed.git(checkout, "rev-parse", "HEAD") == history[0]
    assert not (checkout / ".git" / "gitscale-pending-write.json").exists()
    hook.unlink()
    again = reconcile(checkout, second)
    assert again.returncode == 0 and "no change: nothing to commit" in again.stdout, again
