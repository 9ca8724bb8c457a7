"""Two reconcilers push to the same git:// remote at the same moment; both must land.

Rounds alternate between two kinds of race:

- natural: the two processes simply start together; the second push sees a non-fast-forward
  (``fetch first``), loses on the server (see below), or comes late enough not to race;
- barrier: the remote's pre-receive hook holds each push until both are inside it (a slow server,
  as with hosted git's checks). Both then pass the hook with the same old value and the second
  ref update fails on the server (``cannot lock ref … but expected …``). That is a lost race, not
  a refusal: it must be retried like a non-fast-forward.

Either way the loser recomputes from its own demand on the winner's commit: history is linear,
patch IDs are consecutive and the head commit's trailers describe the head manifest.
"""
from __future__ import annotations

import stat
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from tests.integration import seed
from tests.integration.conftest import CLI_TIMEOUT, GitDaemon, cli_argv, cli_env, rev, run_cli
from tests.integration.seed import NOW, RUNNERS
from tests.integration.test_git_daemon import assert_only_owned_lines_changed

ROUNDS = 6

BARRIER_HOOK = """\
#!/bin/sh
# A barrier, not a gate: wait (at most 5 s) until two pushes are inside this hook, then accept.
cat > /dev/null
touch '{dir}'/arrived.$$
i=0
while [ "$(ls '{dir}' | wc -l)" -lt 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
exit 0
"""


def _install_barrier(bare: Path, directory: Path) -> None:
    directory.mkdir()
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(BARRIER_HOOK.format(dir=directory))
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _race(git_server: GitDaemon, tmp_path: Path, round_no: int, barrier: bool, *,
          stdin: bool = False) -> int:
    """One round; returns how many of the two reconcilers had to retry. ``stdin``: each is
    given its demand as `--demand -`, read once: the loser recomputes from what it read."""
    name = f"race-{round_no}.git"
    bare = git_server.create(seed.FILES, name)
    original = rev(bare)
    if barrier:
        _install_barrier(bare, tmp_path / f"barrier-{round_no}")
    # Targets 4+n and 11+n: never the starting 2, so both reconcilers always have a change to make.
    demands = {"A": (3 + round_no, 1), "B": (9 + round_no, 2)}
    files = {}
    for label, (queued, running) in demands.items():
        files[label] = tmp_path / f"demand-{round_no}-{label}.yaml"
        files[label].write_text(seed.demand_text((queued, running)))

    procs = {}
    try:
        for label in ("A", "B"):  # back to back: both clone the same base
            procs[label] = subprocess.Popen(
                cli_argv("reconcile", "--repo", git_server.url(name), "--demand",
                         "-" if stdin else str(files[label]), "--now", NOW),
                cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True)
        with ThreadPoolExecutor(2) as pool:  # (at once: each waits for its standard input)
            talks = {label: pool.submit(proc.communicate, files[label].read_text()
                                        if stdin else None, CLI_TIMEOUT)
                     for label, proc in procs.items()}
            outputs = {label: talk.result() for label, talk in talks.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for label, proc in procs.items():
        out, err = outputs[label]
        assert proc.returncode == 0, (f"round {round_no} ({'barrier' if barrier else 'natural'})"
                                      f": reconciler {label} exited {proc.returncode}\n"
                                      f"stdout:\n{out}\nstderr:\n{err}")

    # Linear history, two new commits, each on top of the one before.
    assert seed.merges(bare) == []
    history = seed.commits(bare)
    assert len(history) == 3 and history[2] == original, history
    first, head = seed.message(bare, history[1]), seed.message(bare, history[0])
    log = seed.git(bare, "log", "--format=%H %P%n%B", "refs/heads/main")
    said = "\n".join(text for pair in outputs.values() for text in pair)
    context = f"round {round_no}:\n{log}\n{said}"
    assert "linux-x64" in first.sets and "linux-x64" in head.sets, context
    assert first.parent == first.base == original
    assert head.parent == head.base == history[1]

    # Each commit describes one of the demands, and the second builds on the first.
    targets = {label: q + r for label, (q, r) in demands.items()}
    sets_first, sets_head = first.sets["linux-x64"], head.sets["linux-x64"]
    by_demand = {(str(q), str(r)): label for label, (q, r) in demands.items()}
    first_label = by_demand[(sets_first["queued"], sets_first["running"])]
    head_label = by_demand[(sets_head["queued"], sets_head["running"])]
    assert {first_label, head_label} == {"A", "B"}
    assert (sets_first["previous"], sets_first["replicas"], sets_first["patch"]) == \
        ("2", str(targets[first_label]), "8")
    assert (sets_head["previous"], sets_head["replicas"], sets_head["patch"]) == \
        (str(targets[first_label]), str(targets[head_label]), "9")
    assert head.subject == f"gitscale: linux-x64 {targets[first_label]}→{targets[head_label]}"

    # The head manifest parses and agrees with the head commit's trailers.
    text = seed.show(bare, history[0], RUNNERS)
    list(yaml.safe_load_all(text))
    linux = seed.runner_set(text, "linux-x64")
    assert linux["spec"]["replicas"] == targets[head_label] == int(sets_head["replicas"])
    assert linux["spec"]["patchID"] == 9 == int(sets_head["patch"])
    assert_only_owned_lines_changed(seed.RUNNERS_YAML, text, runner_set_doc=2)
    gpu = seed.runner_set(seed.show(bare, history[0], seed.GPU), "gpu")
    assert (gpu["spec"]["replicas"], gpu["spec"]["patchID"]) == (0, 0)

    # One lost race is one retry, said as such ("after 1 retry", not "after 1 retries").
    retried = [out for out, _ in outputs.values() if " after " in out and " retr" in out]
    assert all("and pushed to" in out and ("after 1 retry\n" in out or "after 1 retry;" in out)
               for out in retried), retried
    return len(retried)


def test_two_reconcilers_racing_both_land_linearly(git_server: GitDaemon,
                                                   tmp_path: Path) -> None:
    retried = {"natural": 0, "barrier": 0}
    for round_no in range(ROUNDS):
        barrier = round_no % 2 == 1
        retried["barrier" if barrier else "natural"] += _race(git_server, tmp_path, round_no,
                                                              barrier)
    # With the barrier, both pushes are on the server at once in every such round: one loses.
    assert retried["barrier"] == ROUNDS // 2, retried


def test_a_race_lost_with_the_demand_on_standard_input_is_retried_from_it(
        git_server: GitDaemon, tmp_path: Path) -> None:
    """`--demand -`: the loser decides again from the demand it read at its start (standard
    input, read again, would be empty: an error instead of a retry)."""
    assert _race(git_server, tmp_path, 0, barrier=True, stdin=True) == 1


def test_hook_that_mentions_locks_is_still_a_refusal(git_server: GitDaemon,
                                                     tmp_path: Path) -> None:
    """Only git's own lost-race status is retried; a declining hook stays final, whatever it
    prints (here: the very words git uses when a ref moved under a push)."""
    bare = git_server.create(seed.FILES)
    original = rev(bare)
    counter = tmp_path / "calls"
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\n"
                    f"echo called >> '{counter}'\n"
                    "echo \"error: cannot lock ref 'refs/heads/main': is at 1 but expected 2\""
                    " >&2\n"
                    "exit 1\n")
    hook.chmod(0o755)
    demand = tmp_path / "demand.yaml"
    demand.write_text(seed.demand_text((3, 0)))
    result = run_cli("reconcile", "--repo", git_server.url(), "--demand", str(demand),
                     "--now", NOW, cwd=tmp_path)
    assert result.code == 1, result
    assert "not retried" in result.err, result
    assert counter.read_text().splitlines() == ["called"]
    assert seed.commits(bare) == [original]
