"""`gitscale history`: the scaling commits read back from their trailers, as JSON, text and a
chart."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers import run
from tests.one_set import land_sequence, setup


def test_history_reads_back_the_scaling_commits(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, _ = setup(tmp_path)
    land_sequence(capsys, checkout, tmp_path)

    code, out, _ = run(capsys, "history", "--repo", str(checkout), "--output", "json")
    entries = json.loads(out)
    assert [(e["previous"], e["replicas"], e["patch"]) for e in reversed(entries)] == [
        (1, 1, 0), (1, 3, 1), (3, 1, 2), (1, 1, 0), (1, 3, 1)]
    assert entries[0]["queued"] == 5 and entries[0]["running"] == 0
    assert entries[0]["reason"] == "scale-up" and entries[0]["time"] == "2026-11-21T09:04:00Z"
    assert entries[1]["reason"] == "quiet-reset"

    code, out, _ = run(capsys, "history", "--repo", str(checkout), "--since",
                       "2026-11-21T09:03:00Z", "--chart", str(tmp_path / "c.svg"))
    assert code == 0
    assert out.count("linux") == 2 and "TIME" in out
    assert (tmp_path / "c.svg").read_text().count('<g id="axes_') == 1


def test_a_set_neither_the_config_nor_a_commit_names_is_an_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`--set linx` showed an empty table as if the set had never scaled, and over a URL said
    nothing else: a typo looked like a quiet set."""
    checkout, remote = setup(tmp_path)
    land_sequence(capsys, checkout, tmp_path)
    said = ("error: --set: no scaling commit names set 'linx', and gitscale.yaml has no such "
            "set: did you mean 'linux'? (sets in the scaling commits: linux; in gitscale.yaml: "
            "linux)\n")
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "linx")
    assert code == 1 and out == "", out  # the error alone, no empty table before it
    assert err == said
    # over a URL too: the config is read from the branch's commit (a partial clone of
    # commits only fetches that blob)
    subprocess.run(["git", "config", "uploadpack.allowFilter", "true"], cwd=remote, check=True)
    for url in (str(remote), remote.resolve().as_uri()):
        code, out, err = run(capsys, "history", "--repo", url, "--set", "linx",
                             "--output", "json")
        assert code == 1 and out == "" and err == said
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "linux")
    assert code == 0 and out.count("linux") == 5 and err == "", err


def test_an_empty_history_of_a_known_set_is_no_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A set of the config that never scaled, a window with no commit of a set, a set removed
    from the config whose commits remain: an empty or a full table, exit 0."""
    from tests.helpers import git

    checkout, remote = setup(tmp_path)
    land_sequence(capsys, checkout, tmp_path)
    code, out, err = run(capsys, "history", "--repo", str(remote), "--set", "linux",
                         "--since", "2026-12-01T00:00:00Z")
    assert code == 0 and "(no scaling commits of set 'linux')" in out and err == "", err
    config = checkout / "gitscale.yaml"
    config.write_text(config.read_text().replace("name: linux", "name: gpu"))
    git(checkout, "commit", "-qam", "the set renamed gpu")
    git(checkout, "push", "-q")
    code, out, err = run(capsys, "history", "--repo", str(remote), "--set", "gpu")
    assert code == 0 and "(no scaling commits of set 'gpu')" in out and "error" not in err, err
    assert err.startswith("history: 1 commit after the newest scaling commit"), err
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "gpu")
    # the config edit is a row of no set: shown without --set
    assert code == 0 and "(no scaling commits of set 'gpu')" in out and err == "", err
    code, out, err = run(capsys, "history", "--repo", str(checkout))
    assert code == 0 and "the set renamed gpu" in out and err == "", err
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "linux")
    assert code == 0 and out.count(" linux ") == 5
    assert err == ("history: 'linux' is not a set of gitscale.yaml (its sets: gpu); showing the "
                   "scaling commits that name it\n")


def test_a_shallow_checkout_cannot_tell_a_removed_set_from_a_typo(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """A CI checkout of the last commit only (actions/checkout's default depth): the commits
    that named a set since removed from the config are not in it, so `--set` of that set is no
    error (older commits may name it), as over a URL cloned with --since."""
    from tests.helpers import git

    checkout, remote = setup(tmp_path)
    land_sequence(capsys, checkout, tmp_path)
    config = checkout / "gitscale.yaml"
    config.write_text(config.read_text().replace("name: linux", "name: gpu"))
    git(checkout, "commit", "-qam", "the set renamed gpu")
    git(checkout, "push", "-q")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", remote.resolve().as_uri(),
                    str(shallow)], check=True)
    code, out, err = run(capsys, "history", "--repo", str(shallow), "--set", "linux")
    assert code == 0 and "(no scaling commits of set 'linux')" in out, (out, err)
    assert "error" not in err, err


def test_history_over_a_url_fetches_once(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                         monkeypatch) -> None:
    """The clone without trees is the only fetch: git log must not go back to the remote for
    a tree (with log.mailmap it read HEAD:.mailmap, and fetched HEAD's tree to find it)."""
    checkout, remote = setup(tmp_path)
    land_sequence(capsys, checkout, tmp_path)
    subprocess.run(["git", "config", "uploadpack.allowFilter", "true"], cwd=remote, check=True)
    events = tmp_path / "trace2"
    events.mkdir()
    config = tmp_path / "gitconfig"
    config.write_text(f"[trace2]\n\teventTarget = {events}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))  # gitscale passes it on to git

    code, out, err = run(capsys, "history", "--repo", remote.resolve().as_uri())
    assert code == 0, err
    assert len(out.splitlines()) == 6  # the header and five rows
    started = [json.loads(line)["argv"] for path in events.iterdir()
               for line in path.read_text().splitlines() if '"event":"start"' in line]
    assert sum("upload-pack" in " ".join(argv) for argv in started) == 1, started
    assert any(argv[1:3] == ["clone", "--quiet"] for argv in started), started


def _commit(checkout: Path, message: str) -> str:
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-F", "-"], cwd=checkout,
                   input=message, text=True, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, text=True, check=True,
                          capture_output=True).stdout.strip()


def test_history_never_prints_a_terminal_escape_from_a_commit(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Anyone who can push a commit writes its trailers: an escape sequence there moved the
    cursor, cleared the screen or retitled the terminal of whoever ran `history`."""
    checkout, _ = setup(tmp_path)
    _commit(checkout, "gitscale: x\n\nGitscale-Set: li\x1b[2Jnux replicas=3 previous=1 patch=2 "
                      "queued=3 running=0 reason=scale\x1b]0;owned\x07-up\n")
    code, out, err = run(capsys, "history", "--repo", str(checkout))
    assert code == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "li\\x1b[2Jnux" in out and "scale\\x1b]0;owned\\x07-up" in out
    code, out, _ = run(capsys, "history", "--repo", str(checkout), "--output", "json")
    assert json.loads(out)[0]["set"] == "li\x1b[2Jnux"  # JSON: escaped by JSON, value exact


def test_unreadable_trailers_are_counted_in_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A trailer that cannot be read was passed over without a word."""
    checkout, _ = setup(tmp_path)
    land_sequence(capsys, checkout, tmp_path)
    first = _commit(checkout, "by hand\n\nGitscale-Set: linux replicas=many\x1b[5m\n"
                              "Gitscale-Set: linux replicas=4 previous=3 patch=9 queued=4 "
                              "running=0 reason=scale-up\n")
    first = _commit(checkout, "by hand again\n\nGitscale-Set: linux\n")
    code, out, err = run(capsys, "history", "--repo", str(checkout))
    assert code == 0, err
    assert len(out.splitlines()) == 7  # the header, five rows and the readable hand-written one
    assert err == ("history: 2 Gitscale-Set trailers could not be read (first: "
                   f'{first[:10]} line "Gitscale-Set: linux")\n')
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "gpu",
                         "--output", "json")
    # another set's: not counted (gpu is no set of this config nor of a commit: an error)
    assert code == 1 and out == "" and "could not be read" not in err
    assert err.startswith("error: --set: no scaling commit names set 'gpu'"), err


def test_commits_by_people_on_a_managed_manifest_are_rows(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """A `git revert` of a drain, and a pause, are not gitscale's commits: without them
    history's newest row for the set said 3→0 while the repo said 3."""
    from tests.helpers import git
    from tests.one_set import reconcile

    checkout, remote = setup(tmp_path)
    reconcile(capsys, checkout, tmp_path, 2, 0, "2026-11-21T09:00:00Z")
    assert run(capsys, "drain", "--repo", str(checkout), "linux",
               "--now", "2026-11-21T09:01:00Z")[0] == 0
    import os

    env = {**os.environ, "GIT_AUTHOR_NAME": "Ana Ops", "GIT_AUTHOR_EMAIL": "ana@example.com",
           "GIT_COMMITTER_NAME": "Ana Ops", "GIT_COMMITTER_EMAIL": "ana@example.com",
           "GIT_COMMITTER_DATE": "2026-11-21T09:02:00Z"}
    subprocess.run(["git", "revert", "--no-edit", "HEAD"], cwd=checkout, env=env, check=True,
                   capture_output=True)
    (checkout / "README").write_text("not a manifest\n")
    git(checkout, "add", "README")
    subprocess.run(["git", "commit", "-qm", "docs"], cwd=checkout, env=env, check=True)

    code, out, err = run(capsys, "history", "--repo", str(checkout), "--output", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["reason"], r["previous"], r["replicas"]) for r in rows] == [
        ("manual", 0, 3), ("drain", 3, 0), ("first-write", 1, 3)]
    revert = rows[0]
    assert revert["author"] == "Ana Ops" and revert["set"] == "linux"
    assert revert["subject"].startswith('Revert "gitscale: linux 3→0')
    assert revert["patch"] is not None and revert["queued"] is None
    assert set(rows[1]) == set(rows[0]) - {"author", "subject"}  # gitscale's rows: as before

    code, out, err = run(capsys, "history", "--repo", str(checkout))
    first = out.splitlines()[1].split()
    assert first[2:6] == ["linux", "0→3", first[4], "-"] and "manual" in out.splitlines()[1]
    assert out.splitlines()[1].endswith('by Ana Ops: Revert "gitscale: linux 3→0"')
    assert "docs" not in out  # README is not managed

    # over a clone (commit messages only) they are not looked into: a note says so
    code, out, err = run(capsys, "history", "--repo", str(remote))
    assert code == 0 and "manual" not in out
    git(checkout, "push", "--quiet")
    code, out, err = run(capsys, "history", "--repo", str(remote))
    assert code == 0 and "manual" not in out
    assert err.startswith("history: 2 commits after the newest scaling commit (")
    assert "are not gitscale's and may have changed a set (a revert, a pause)" in err


def test_only_edits_of_what_gitscale_owns_are_rows(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch) -> None:
    """A bot bumping an image or a label in a managed manifest changes nothing gitscale owns:
    no row. Replicas, the patch ID, a pause, a deletion and any config edit are rows, with the
    count before and after."""
    import os

    from gitscale.record import manual
    from tests.helpers import git
    from tests.one_set import reconcile

    checkout, _ = setup(tmp_path)
    reconcile(capsys, checkout, tmp_path, 2, 0, "2026-11-21T09:00:00Z")  # linux: 1→3
    manifest = checkout / "sets/linux.yaml"
    minute = iter(range(1, 60))

    def by_hand(subject: str, path: Path, old: str, new: str) -> None:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))
        when = f"2026-11-21T09:{next(minute):02d}:00Z"
        env = {**os.environ, "GIT_AUTHOR_NAME": "Renovate Bot",
               "GIT_AUTHOR_EMAIL": "bot@example.com", "GIT_COMMITTER_NAME": "Renovate Bot",
               "GIT_COMMITTER_EMAIL": "bot@example.com", "GIT_COMMITTER_DATE": when,
               "GIT_AUTHOR_DATE": when}
        subprocess.run(["git", "commit", "-qam", subject], cwd=checkout, env=env, check=True)

    by_hand("image 2", manifest, "image: runner:1", "image: runner:2")
    by_hand("label", manifest, "  name: linux\n", "  name: linux\n  labels: {team: ci}\n")
    by_hand("replicas 5", manifest, "replicas: 3", "replicas: 5")
    by_hand("image 3", manifest, "image: runner:2", "image: runner:3  # pinned")
    by_hand("pause", manifest, "  annotations:\n", "  annotations:\n"
            "    gitscale.dev/paused: \"true\"\n")
    by_hand("patch", manifest, "patchID: 0", "patchID: 7")
    by_hand("max 4", checkout / "gitscale.yaml", "maxReplicas: 3", "maxReplicas: 4")
    git(checkout, "rm", "--quiet", "sets/linux.yaml")
    by_hand("drop linux", checkout / "demand.yaml", "queued", "queued")  # commits the removal

    code, out, err = run(capsys, "history", "--repo", str(checkout), "--output", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["subject"] if r["reason"] == "manual" else r["reason"], r["set"], r["previous"],
             r["replicas"], r["patch"]) for r in rows] == [
        ("drop linux", "linux", 5, None, None),
        ("max 4", None, None, None, None),
        ("patch", "linux", 5, 5, 7),
        ("pause", "linux", 5, 5, 0),
        ("replicas 5", "linux", 3, 5, 0),
        ("first-write", "linux", 1, 3, 0)]
    assert all(set(r) == set(rows[-1]) | {"author", "subject"} for r in rows[:-1])
    assert rows[0]["author"] == "Renovate Bot" and rows[0]["detail"] == "drop linux"

    code, text, err = run(capsys, "history", "--repo", str(checkout), "--set", "linux")
    lines = text.splitlines()
    assert [line.split()[2:5] for line in lines[1:]] == [
        ["linux", "-", "-"], ["linux", "5→5", "7"], ["linux", "5→5", "0"],
        ["linux", "3→5", "0"], ["linux", "1→3", "0"]]
    assert "max 4" not in text  # the config's edit: a row of no set, shown without --set

    # read a commit or two at a time, the blobs before and after still pair up across blocks
    monkeypatch.setattr(manual, "FIRST_BLOCK", 1)
    monkeypatch.setattr(manual, "LAST_BLOCK", 2)
    assert run(capsys, "history", "--repo", str(checkout), "--set", "linux")[1] == text


def test_a_merge_that_sets_what_gitscale_owns_is_a_row(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """A merge whose conflict is resolved by hand to a count neither side had is a row,
    compared with its first parent (the branch it landed on): without it the newest row said
    what a side commit did. A merge that only brings a side's count (whose own commit is a row
    already), or keeps its first parent's, is no row."""
    import os

    from tests.helpers import git
    from tests.one_set import reconcile

    checkout, _ = setup(tmp_path)
    reconcile(capsys, checkout, tmp_path, 2, 0, "2026-11-21T09:00:00Z")  # linux: 1→3
    manifest = checkout / "sets/linux.yaml"
    minute = iter(range(1, 60))

    def commit(*args: str) -> None:
        when = f"2026-11-21T09:{next(minute):02d}:00Z"
        env = {**os.environ, "GIT_AUTHOR_NAME": "Ana Ops", "GIT_AUTHOR_EMAIL": "ana@example.com",
               "GIT_COMMITTER_NAME": "Ana Ops", "GIT_COMMITTER_EMAIL": "ana@example.com",
               "GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when}
        subprocess.run(["git", "commit", "-q", *args], cwd=checkout, env=env, check=True)

    def by_hand(subject: str, old: str, new: str) -> None:
        text = manifest.read_text()
        assert old in text
        manifest.write_text(text.replace(old, new, 1))
        commit("-am", subject)

    def merge(branch: str, subject: str, resolved: str | None = None) -> None:
        done = subprocess.run(["git", "merge", "-q", "--no-ff", "--no-commit", branch],
                              cwd=checkout, capture_output=True, check=False)
        assert (done.returncode != 0) == (resolved is not None), done
        if resolved is not None:
            manifest.write_text(resolved)
            git(checkout, "add", "sets/linux.yaml")
        commit("-m", subject)

    git(checkout, "checkout", "-q", "-b", "side")
    by_hand("side 6", "replicas: 3", "replicas: 6")
    git(checkout, "checkout", "-q", "main")
    by_hand("main 4", "replicas: 3", "replicas: 4")
    ours = manifest.read_text()
    merge("side", "merge 12", ours.replace("replicas: 4", "replicas: 12"))  # a conflict
    git(checkout, "checkout", "-q", "-b", "side2")
    by_hand("side2 7", "replicas: 12", "replicas: 7")
    git(checkout, "checkout", "-q", "main")
    by_hand("image 2", "image: runner:1", "image: runner:2")
    merge("side2", "merge side2")  # clean: brings 7 (and keeps the image): side2 7's row
    git(checkout, "checkout", "-q", "-b", "side3")
    by_hand("side3 9", "replicas: 7", "replicas: 9")
    git(checkout, "checkout", "-q", "main")
    by_hand("main 5", "replicas: 7", "replicas: 5")
    kept = manifest.read_text().replace("image: runner:2", "image: runner:3")
    merge("side3", "merge ours", kept)  # a conflict resolved to main's 5: nothing new

    code, out, err = run(capsys, "history", "--repo", str(checkout), "--output", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["subject"] if r["reason"] == "manual" else r["reason"], r["previous"],
             r["replicas"]) for r in rows] == [
        ("main 5", 7, 5), ("side3 9", 7, 9), ("side2 7", 12, 7), ("merge 12", 4, 12),
        ("main 4", 3, 4), ("side 6", 3, 6), ("first-write", 1, 3)]
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "linux")
    assert "merge ours" not in out and "merge side2" not in out


def test_serves_own_commits_without_a_set_are_not_unseen(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """`gitscale serve` commits reservations alone (a job started or completed, a resync's
    correction) without a Gitscale-Set trailer: history over a URL counted them as commits "not
    gitscale's" that "may have changed a set", after every serve batch."""
    from gitscale.record.commitmsg import format_message
    from tests.helpers import git

    checkout, remote = setup(tmp_path)
    land_sequence(capsys, checkout, tmp_path)
    state = checkout / ".gitscale" / "reservations.yaml"
    state.parent.mkdir()
    for n, (events, notes) in enumerate([({"in_progress": 1}, ()), ({"completed": 1}, ()),
                                         ({}, ("resync with GitHub, linux: removed 1 (job 5)",))]):
        state.write_text(f"served: [linux]\nsets: {{}}\n# {n}\n")
        git(checkout, "add", ".gitscale")
        message = format_message([], git(checkout, "rev-parse", "HEAD"), events, notes,
                                 [".gitscale/reservations.yaml"])
        git(checkout, "commit", "--quiet", "-m", message)
    git(checkout, "push", "--quiet")
    code, out, err = run(capsys, "history", "--repo", str(remote))
    assert code == 0 and err == "", err

    # a person's commit after them is still said, and only it
    (checkout / "README").write_text("notes\n")
    git(checkout, "add", "README")
    git(checkout, "commit", "--quiet", "-m", "docs\n\nGitscale-Base: 0123456789abc")
    git(checkout, "push", "--quiet")
    code, out, err = run(capsys, "history", "--repo", str(remote))
    assert code == 0 and err.startswith("history: 1 commit after the newest scaling commit ("), err
