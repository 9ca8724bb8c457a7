"""`gitscale history`'s rows besides the scaling commits: the commits by people that changed what
gitscale owns (read in a checkout, alongside the scaling ones, newest first), and the notes on
stderr about what a clone cannot show or a --set the config does not name."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, NamedTuple

from gitscale.record.history import Entry
from gitscale.repo.workspace import Workspace

if TYPE_CHECKING:
    from gitscale.config.load import ObjectRef


class HandRow(NamedTuple):
    """A commit that is not gitscale's but changed what gitscale owns in a managed manifest
    (``set``: that set; None: gitscale.yaml): its author and subject, and the set's replicas
    and patch ID before (``previous``) and after it, each when its object could be read."""

    commit: str
    time: str
    set: str | None
    previous: int | None
    replicas: int | None
    patch: int | None
    author: str
    subject: str


Row = Entry | HandRow


def hand_rows(ws: Workspace, config_path: str, only: str | None) -> Iterator[HandRow]:
    """The commits that are not gitscale's and change what gitscale owns in a managed manifest
    (of ``only``, when given) or the config file, newest first: a row per set whose owned
    fields (replicas, patch ID, the paused and drained annotations) each changed, with what the
    set's object says before and after it; without ``only``, one row (set None) for a change of
    the config file (any: what it means is the config's business). A manifest edit that leaves them as they
    were (a label, an image bumped by a bot) is no row. The managed paths are those of the
    config in the checkout; a config that cannot be read shows none (the scaling rows still
    do). A merge is compared with its first parent, and is a row only for what it made
    anew: a path that differs from every parent (``log -c``) whose owned fields are not
    those of one of its other parents (the merged side's own commits are rows already)."""
    from gitscale.config.load import load_config
    from gitscale.errors import GitscaleError
    from gitscale.record.manual import iter_manual, with_blobs

    try:
        config = load_config(ws.root, config_path)
    except GitscaleError:
        return
    by_path: dict[str, list[tuple[str, ObjectRef]]] = {}
    for runner_set in config.sets:
        if only is None or runner_set.name == only:
            by_path.setdefault(runner_set.manifest, []).append((runner_set.name,
                                                                runner_set.object))
    owned = _OwnedReader()
    # a config edit is a row of no set: shown without --set only (--set narrows to the set)
    watched = [*by_path] if only is not None else [config.path, *by_path]
    for commit, blobs in with_blobs(ws.git, iter_manual(ws.git, watched), by_path):
        touched = [c for c in commit.changes if c.path in by_path]
        if not touched:
            yield HandRow(commit.commit, commit.time, None, None, None, None, commit.author,
                          commit.subject)
            continue
        for path, before, after, others in touched:
            for name, ref in by_path[path]:
                old = owned.read(path, before, blobs, ref)
                new = owned.read(path, after, blobs, ref)
                if old is not None and new is not None and old == new:
                    continue  # a label, an image, a comment: nothing gitscale owns
                if new is not None and any(owned.read(path, other, blobs, ref) == new
                                           for other in others):
                    continue  # a merge bringing a side's values: that side's commits say so
                yield HandRow(commit.commit, commit.time, name,
                              None if old is None else old[0], None if new is None else new[0],
                              None if new is None else new[1], commit.author, commit.subject)


Owned = tuple[int | None, int | None, bool, bool]  # replicas, patch ID, paused, drained


class _OwnedReader:
    """The owned fields of a set's object in a blob, read with the manifest code
    (``manifest.target.locate``: the line reader, then PyYAML) once per blob and object."""

    KEPT = 4096  # a commit's blob before is usually the next older one's after

    def __init__(self) -> None:
        self.seen: dict[tuple[str, ObjectRef], Owned | None] = {}

    def read(self, path: str, blob: str | None, blobs: dict[str, bytes],
             ref: ObjectRef) -> Owned | None:
        """None: no blob (deleted), not read, or its object cannot be read there."""
        from gitscale.errors import GitscaleError
        from gitscale.manifest.target import locate

        if blob is None or blob not in blobs:
            return None
        key = (blob, ref)
        if key in self.seen:
            return self.seen[key]
        if len(self.seen) >= self.KEPT:
            self.seen.clear()
        found: Owned | None
        try:
            now = locate(path, blobs[blob].decode("utf-8"), ref).current
            found = (now.replicas, now.patch_id, now.paused, now.drained)
        except (GitscaleError, UnicodeDecodeError):
            found = None  # "manual edit" without a count: the object cannot be read there
        self.seen[key] = found
        return found


def merged(scaling: Iterator[Entry], hand: Iterator[HandRow]) -> Iterator[Row]:
    """Both, newest first: a commit by a person is shown before the scaling rows it is no
    older than (a revert comes after what it reverts). Both walks go on as the rows are read,
    so the first rows still show at once."""
    pending = next(hand, None)
    for entry in scaling:
        while pending is not None and pending.time >= entry.time:
            yield pending
            pending = next(hand, None)
        yield entry
    if pending is not None:
        yield pending
        yield from hand


def unseen_note(ws: Workspace) -> str | None:
    """Over a clone (commit messages, no trees), commits by people are not looked into: say how
    many come after the newest scaling commit, where they may have changed a set."""
    from gitscale.record.manual import unseen_after

    found = unseen_after(ws.git)
    if found is None:
        return None
    newest, count = found
    return (f"history: {count} commit{'s' if count != 1 else ''} after the newest scaling "
            f"commit ({newest[:10]}) {'are' if count != 1 else 'is'} not gitscale's and may have "
            "changed a set (a revert, a pause): run `gitscale history` in a checkout to see "
            f"{'them' if count != 1 else 'it'} as rows, or `git log {newest[:10]}..`")


def names_a_set(configured: dict[str, tuple[str, ...]], name: str) -> bool:
    """Whether the config names ``name``: a set's name, or one of its ``previousNames``."""
    return name in configured or any(name in previous for previous in configured.values())


def unknown_set_error(ws: Workspace, configured: dict[str, tuple[str, ...]], config_path: str,
                      only: str) -> str | None:
    """When no row of ``only`` was found: why, if it is no set at all — neither the config
    (``configured``: the checkout's, or the branch's over a URL, its ``previousNames``
    included) nor any scaling commit names it (a typo), with the known names, the nearest
    first — else None (a set that never scaled, or not in the window, or removed from the
    config: an empty table says that). Not said when it cannot be known: a clone of recent
    commits only (``--since`` over a URL, a shallow checkout)."""
    if names_a_set(configured, only):
        return None
    from gitscale.record.history import iter_history

    if ws.git.is_shallow():  # a --since clone, or a CI checkout of the last commit(s)
        return None  # older commits, not fetched, may name it
    seen = {entry.set for entry in iter_history(ws.git, details=False)}
    if only in seen:
        return None
    import difflib  # (an error's only)

    def likeness(*names: str) -> float:
        return max(difflib.SequenceMatcher(None, only, name).ratio() for name in names)

    known = [*configured, *(n for previous in configured.values() for n in previous), *seen]
    near = difflib.get_close_matches(only, dict.fromkeys(known), n=1)
    sets = [name + (f" (previously {', '.join(configured[name])})" if configured[name] else "")
            for name in sorted(configured, key=lambda n: -likeness(n, *configured[n]))]
    return (f"no scaling commit names set {only!r}, and {config_path} has no such set"
            f"{f': did you mean {near[0]!r}?' if near else ''} (sets in the scaling commits: "
            f"{_names(sorted(sorted(seen), key=lambda n: -likeness(n)))}; in {config_path}: "
            f"{_names(sets)})")


def _names(names: list[str]) -> str:
    shown = [name if name.isprintable() else repr(name) for name in names[:20]]
    return (", ".join(shown) + (f", … ({len(names)} in all)" if len(names) > 20 else "")
            or "none")


def config_sets(ws: Workspace, config_path: str) -> dict[str, tuple[str, ...]]:
    """The set names of the config, each with its ``previousNames``, read and validated as a
    pass reads it: the checkout's file, or over a URL the branch's (a clone of commit messages
    fetches that blob, and the presets of ``policies/`` it names). A config that cannot be read
    is a ``ConfigError`` at its line, in both."""
    from gitscale.config.load import config_from_commit, load_config

    if ws.mode == "checkout":
        config = load_config(ws.root, config_path)
    else:
        config = config_from_commit(config_path, lambda path: ws.git.entry("HEAD", path))
    return {s.name: s.previous_names for s in config.sets}


def set_names(configured: dict[str, tuple[str, ...]] | None, config_path: str,
              only: str | None) -> tuple[tuple[str, ...] | None, str | None]:
    """The names whose scaling commits ``--set ONLY`` shows, and a note for stderr. A set of
    the config (``configured``, read when ``only`` is given) with ``previousNames`` shows
    theirs too (each row under its commit's own name: the history as it was written); an old
    name shows its own commits, with a note naming the set it became; a name the config does
    not have at all is said (a typo, which ``unknown_set_error`` tells once the commits are
    read, or a set removed since, whose commits are still shown)."""
    if only is None or configured is None:
        return None, None
    if only in configured:
        return (only, *configured[only]), None
    became = next((name for name, previous in configured.items() if only in previous), None)
    if became is not None:
        return (only,), (f"history: {only!r} is a previous name of set {became!r} (its "
                         f"previousNames in {config_path}): showing the scaling commits that "
                         f"name {only!r}; --set {became} shows them with those since the rename")
    return (only,), (f"history: {only!r} is not a set of {config_path} (its sets: "
                     f"{', '.join(configured) or 'none'}); showing the scaling commits that "
                     "name it")
