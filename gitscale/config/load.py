"""gitscale.yaml: the runner sets, their manifests, demand sources and policies (a policy's
mapping made a ``Policy``: ``config.policies``; a preset's file read here)."""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, MutableMapping, Optional, Sequence, Union

from gitscale import files
from gitscale.config import DEFAULT_CONFIG
from gitscale.core.policy import Policy
from gitscale.config.sources import SOURCES
from gitscale.errors import ConfigError, shown
from gitscale.config.policies import build_policy
from gitscale.config.schemas import check_schema
from gitscale.config.secrets import SecretRef, hold_named
from gitscale.yamlio.read import Document, load_single

if TYPE_CHECKING:
    from gitscale.config.notify_targets import Target

# importlib.resources (shipped presets), zoneinfo and gitscale.core.recurrence (schedules, in
# config.policies) and gitscale.config.notify_targets (`notify:`) are imported by the functions
# that use them: a config read from the state cache needs none of them, and they cost ~10 ms of
# a CLI start.

SourceKind = str  # a key of gitscale.config.sources.SOURCES
# a commit's policies/NAME.yaml by NAME: its text, or None when the commit has none
PresetReader = Callable[[str], Optional[str]]
# a path of a commit: its git mode and, for a file, its bytes (``Git.entry``); None: no such path
CommitEntry = Callable[[str], Optional[tuple[str, Optional[bytes]]]]
SYMLINK = "120000"  # git's mode of a symlink
MAX_SETS = 100_000  # runnerSets' maxItems in schemas.CONFIG


@dataclass(frozen=True)
class ObjectRef:
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class Source:
    kind: SourceKind
    settings: Any  # the source's frozen dataclass (gitscale.config.sources)


@dataclass(frozen=True)
class RunnerSetConfig:
    name: str
    manifest: str  # POSIX path relative to the repo root
    object: ObjectRef
    source: Source
    policy: Policy
    # ``previousNames``: what the set was called before a rename. Its scaling commits under
    # them are its own: `history --set`, a forecast's series and serve's reservations read them
    previous_names: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Its name, then the names it had before (newest rename first, as written)."""
        return (self.name, *self.previous_names)

    @cached_property
    def decision_key(self) -> str:
        """A digest of what the decision reads from the config for this set (manifest, object,
        policy): a decision remembered from an earlier pass holds only while it is the same."""
        basis = repr((self.manifest, self.object, self.policy)).encode()
        return hashlib.blake2b(basis, digest_size=12).hexdigest()


@dataclass(frozen=True)
class Config:
    path: str
    sets: tuple[RunnerSetConfig, ...]
    max_total_replicas: int | None = None  # limits.maxTotalReplicas: shared by all sets
    notify: tuple[Target, ...] = ()  # GitOps engines to tell after a push
    text: str = field(default="", repr=False, compare=False)  # for line numbers in errors
    document: int = 0  # which YAML document of ``text``

    def line(self, name: str, key: str) -> int | None:
        """The line of runner set ``name``'s ``key`` (or of the set). Errors only: it parses
        the text again, which a pass without errors never pays for."""
        index = next((i for i, s in enumerate(self.sets) if s.name == name), None)
        if index is None or not self.text:
            return None
        return Document(None, self.text, self.document).line_of(["runnerSets", index, key])

    def line_at(self, name: str, path: Sequence[str | int]) -> int | None:
        """The line of ``path`` inside runner set ``name`` (or of its deepest part written)."""
        index = next((i for i, s in enumerate(self.sets) if s.name == name), None)
        if index is None or not self.text:
            return None
        return Document(None, self.text, self.document).line_of(["runnerSets", index, *path])

    def lines(self) -> ConfigLines:
        """``line_at`` for many sets, the text composed once (``line_at`` composes it at each
        call: a thousand warnings, one per set, took a minute and more)."""
        return ConfigLines(self)

    def secret_line(self, name: str, ref: SecretRef) -> int | None:
        """The line of runner set ``name``'s source that writes ``ref`` (``env: NAME``), or
        None when the source does not write it (a default, such as ``{env: GITHUB_TOKEN}``)."""
        index = next((i for i, s in enumerate(self.sets) if s.name == name), None)
        if index is None or not self.text:
            return None
        return Document(None, self.text, self.document).entry_line(
            ["runnerSets", index, "source"], ref.kind, ref.where)

    def blame(self, name: str, key: str, message: str) -> ConfigError:
        """An error about runner set ``name``, at the line of its ``key`` in the config."""
        return ConfigError(self.path, f"runner set {name!r}: {message}", self.line(name, key))

    @cached_property
    def secrets(self) -> frozenset[SecretRef]:
        """Every credential the config names: the sets' sources' and the notify targets'."""
        found = {SecretRef.parse(t.secret) for t in self.notify if t.secret is not None}
        for source in {id(s.source): s.source for s in self.sets}.values():
            found.update(SOURCES[source.kind].secrets(source.settings))
        return frozenset(found)

    def get(self, name: str) -> RunnerSetConfig:
        for runner_set in self.sets:
            if runner_set.name == name:
                return runner_set
        known = ", ".join(s.name for s in self.sets) or "none"
        raise ConfigError(self.path, f"no runner set named {name!r} (known: {known})")


class ConfigLines:
    """The lines of many sets' keys, for a command that says something of each (``validate``'s
    warnings): the config's text composed once, and dropped with this object (never kept with
    the ``Config``, which the config store pickles)."""

    def __init__(self, config: Config) -> None:
        self._document = Document(None, config.text, config.document) if config.text else None
        self._index = {s.name: i for i, s in enumerate(config.sets)}

    def at(self, name: str, path: Sequence[str | int]) -> int | None:
        """As ``Config.line_at``."""
        index = self._index.get(name)
        if index is None or self._document is None:
            return None
        return self._document.line_of(["runnerSets", index, *path])


def load_config(root: Path, config_path: str = DEFAULT_CONFIG,
                cache: MutableMapping[str, Config] | None = None) -> Config:
    """Read and validate ``config_path`` inside the checkout at ``root``.

    With ``cache``, a config whose text (and local presets) was seen before is not parsed and
    validated again: a thousand sets take a quarter of a second to check.
    """
    path = safe_repo_path(root, config_path, config_path, ConfigError)
    try:
        text = files.read_text(path, config_path, ConfigError)
    except FileNotFoundError:
        raise ConfigError(config_path, "not found in the config repo (run `gitscale init`?)") from None
    except IsADirectoryError:
        raise ConfigError(config_path, "is a directory, not a config file (--config names "
                          "the file in the config repo, such as gitscale.yaml)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(config_path, f"cannot be read: {exc}") from None
    key = _cache_key(root, config_path, text) if cache is not None else ""
    if cache is not None and key in cache:
        config = cache[key]
    else:
        config = _parse(root, config_path, text)
        if cache is not None:
            cache[key] = config
    # what it names is masked in every output from now on, read by this pass or not
    hold_named(config.secrets)
    return config


def config_from_commit(config_path: str, entry: CommitEntry) -> Config:
    """The config of a commit that is not checked out (`history`'s clone of a URL holds commit
    messages, no files): ``entry(PATH)`` is a path of the commit as git keeps it (its mode and
    a file's bytes; None: the commit has no such path), read for the config file and the
    ``policies/NAME.yaml`` presets it names (none: gitscale's own preset of that name).
    Validated as ``load_config`` validates a checkout's, each error at its line, with its words
    for a folder or a symlink where a file belongs."""
    pure = relative_path(config_path, config_path, ConfigError)
    found = _committed(entry, pure, config_path)
    if found is None:
        raise ConfigError(config_path, "not found in the config repo (run `gitscale init`?)")
    if found[1] is None:
        raise ConfigError(config_path, "is a directory, not a config file (--config names "
                          "the file in the config repo, such as gitscale.yaml)")

    def preset(name: str) -> str | None:
        label = f"policies/{name}.yaml"
        for path in ("policies", label):
            if (mode := entry(path)) is not None and mode[0] == SYMLINK:
                raise ConfigError(path, "is a symlink (gitscale reads only regular files in "
                                  "the config repo)")
        text = entry(label)
        # (a folder of that name is not a preset: the shipped one applies, as in a checkout)
        return None if text is None or text[1] is None else _blob_text(text[1], label)

    config = _parse(None, config_path, _blob_text(found[1], config_path), preset)
    hold_named(config.secrets)
    return config


def _committed(entry: CommitEntry, pure: PurePosixPath,
               source: str) -> tuple[str, bytes | None] | None:
    """``pure`` in a commit; a symlink on its way is an error, as ``safe_repo_path`` says it."""
    for depth in range(1, len(pure.parts) + 1):
        path = "/".join(pure.parts[:depth])
        found = entry(path)
        if found is None:
            return None
        if found[0] == SYMLINK:
            raise ConfigError(source, f"{source!r} goes through a symlink ({path}); gitscale "
                              "edits only regular files inside the config repo")
        if depth == len(pure.parts):
            return found
    return None


def _blob_text(data: bytes, label: str) -> str:
    if len(data) > files.MAX_BYTES:  # as a checkout's file (``files.read_bytes``)
        raise ConfigError(label, f"is {len(data):,} bytes; gitscale reads files of at most "
                          f"{files.MAX_BYTES:,} bytes")
    return files.decode(data, label, ConfigError)


def _cache_key(root: Path, config_path: str, text: str) -> str:
    digest = hashlib.sha256(f"{config_path}\0{text}".encode())
    policies = root / "policies"
    if policies.is_symlink():
        digest.update(b"\0policies: a symlink")  # refused by load_preset: never cached
    elif policies.is_dir():
        for preset in sorted(policies.glob("*.yaml")):
            digest.update(f"\0{preset.name}\0".encode())
            if preset.is_symlink() or not preset.is_file():
                # never read here (a link to /dev/zero would never end); load_preset refuses it
                digest.update(b"not a regular file")
                continue
            digest.update(preset.read_bytes())
    return digest.hexdigest()


def _parse(root: Path | None, config_path: str, text: str,
           read_preset: PresetReader | None = None) -> Config:
    """``root``: the checkout, whose files are checked (no link on a manifest's path) and
    whose ``policies/`` is read; None: ``read_preset`` reads a commit's
    (``config_from_commit``)."""
    document = load_single(text, config_path, ConfigError)

    def describe(p: list[Any]) -> str:
        if len(p) >= 2 and p[0] == "notify" and isinstance(p[1], int):
            return f"notify[{p[1]}] " + ".".join(str(x) for x in p[2:])
        if len(p) >= 2 and p[0] == "runnerSets" and isinstance(p[1], int):
            items = document.data.get("runnerSets") or []
            item = items[p[1]] if p[1] < len(items) else None
            name = item.get("name") if isinstance(item, dict) else None
            label = f"runner set {shown(name)}" if isinstance(name, str) else \
                f"runnerSets[{p[1]}]"
            rest = ".".join(str(x) for x in p[2:])
            return f"{label} {rest}".strip() if rest else label
        return ".".join(str(x) for x in p) or "(top level)"

    items = document.data.get("runnerSets") if isinstance(document.data, dict) else None
    if isinstance(items, list) and len(items) > MAX_SETS:
        # said before the schema check: explaining a schema error walks every item
        raise ConfigError(config_path, f"{len(items):,} runner sets: gitscale handles at most "
                          f"{MAX_SETS:,} in one config file (split them across config repos, "
                          "or files with --config)", _top_key_line(text, "runnerSets"))
    check_schema(document, "CONFIG", config_path, ConfigError, describe)
    sets: list[RunnerSetConfig] = []
    seen: dict[str, int] = {}
    presets: dict[str, Policy] = {}  # a thousand sets naming one preset read it once
    shared: dict[tuple[str, str], Source] = {}  # one object per demand file named
    refs: dict[ObjectRef, ObjectRef] = {}  # ... and per object reference (most say none)
    for index, item in enumerate(document.data["runnerSets"]):
        at: list[str | int] = ["runnerSets", index]
        name = item["name"]
        if name in seen:
            first = document.line_of(["runnerSets", seen[name]])
            raise ConfigError(config_path, f"runner set {name!r} is declared twice "
                              f"(first at line {first})", document.line_of([*at, "name"]))
        seen[name] = index
        manifest = item["manifest"]
        if root is None:
            relative_path(manifest, config_path, ConfigError,
                          partial(document.line_of, [*at, "manifest"]))
        else:
            safe_repo_path(root, manifest, config_path, ConfigError,
                           partial(document.line_of, [*at, "manifest"]))
        (kind, settings), = item["source"].items()
        if kind == "github" and "app" in settings and len(owners := sorted(
                {repo.split("/")[0].lower() for repo in settings.get("repos", ())})) > 1:
            # an installation (and its token) is one account's: the others' repos would be
            # refused, pass after pass
            raise ConfigError(config_path, f"runner set {name!r}: its repos belong to "
                              f"{len(owners)} owners ({', '.join(owners[:5])}"
                              f"{', …' if len(owners) > 5 else ''}), and a GitHub App's "
                              "installation token reads one owner's repositories: give each "
                              "owner its own set, or use a token that reads them all",
                              document.line_of([*at, "source", "github", "repos"]))
        raw_policy = item["policy"]
        if isinstance(raw_policy, str):
            if raw_policy not in presets:
                presets[raw_policy] = load_preset(root, raw_policy, config_path,
                                                  partial(document.line_of, [*at, "policy"]),
                                                  read_preset)
            policy = presets[raw_policy]
        else:
            policy = build_policy(raw_policy, document, [*at, "policy"], config_path)
            # one object per distinct policy: ten thousand sets cache (pickle) 2× faster
            policy = presets.setdefault(f"\0{policy!r}", policy)
        ref = item.get("object") or {}
        found = ObjectRef(ref.get("kind"), ref.get("name"), ref.get("namespace"))
        sets.append(RunnerSetConfig(
            name=name,
            manifest=str(PurePosixPath(manifest)),
            object=refs.setdefault(found, found),
            source=(shared[(kind, settings)] if (kind, settings) in shared
                    else shared.setdefault((kind, settings),
                                           Source(kind, SOURCES[kind].settings(settings))))
            if isinstance(settings, str) else Source(kind, SOURCES[kind].settings(settings)),
            policy=policy,
            previous_names=_previous_names(item, name, at, document, config_path),
        ))
    _check_renames(sets, seen, document, config_path)
    total = (document.data.get("limits") or {}).get("maxTotalReplicas")
    if total is not None and sum(s.policy.min_replicas for s in sets) > total:
        raise ConfigError(config_path, f"limits.maxTotalReplicas {total} is less than the sets' "
                          f"minReplicas together ({sum(s.policy.min_replicas for s in sets)})",
                          document.line_of(["limits", "maxTotalReplicas"]))
    from gitscale.config.notify_targets import parse_targets  # a config parsed, not cached

    return Config(config_path, tuple(sets), total, parse_targets(document, config_path), text,
                  document.index)


def _previous_names(item: dict[str, Any], name: str, at: list[str | int],
                    document: Document, config_path: str) -> tuple[str, ...]:
    """A set's ``previousNames`` (strings of a set name's form: the schema's), each once and
    none its own name."""
    names = item.get("previousNames") or []
    for number, previous in enumerate(names):
        # (lines only for an error: they compose the whole file's node tree)
        if previous == name:
            raise ConfigError(config_path, f"runner set {name!r}: previousNames: {previous!r} "
                              "is the set's own name (list only the names it had before a "
                              "rename)", document.line_of([*at, "previousNames", number]))
        if previous in names[:number]:
            first = document.line_of([*at, "previousNames", names.index(previous)])
            raise ConfigError(config_path, f"runner set {name!r}: previousNames: {previous!r} "
                              f"is listed twice (first at line {first})",
                              document.line_of([*at, "previousNames", number]))
    return tuple(names)


def _check_renames(sets: list[RunnerSetConfig], seen: dict[str, int], document: Document,
                   config_path: str) -> None:
    """A previous name is no current set's name, nor another set's previous name: each
    scaling commit of the history belongs to one set (a name given up and taken by a new
    set is the new set's, from then on and before)."""
    claimed: dict[str, int] = {}
    for index, runner_set in enumerate(sets):
        for number, previous in enumerate(runner_set.previous_names):
            if previous not in seen and previous not in claimed:
                claimed[previous] = index
                continue
            # (lines only for an error: they compose the whole file's node tree)
            line = document.line_of(["runnerSets", index, "previousNames", number])
            if previous in seen:
                other = document.line_of(["runnerSets", seen[previous], "name"])
                raise ConfigError(config_path, f"runner set {runner_set.name!r}: previousNames: "
                                  f"{previous!r} is the name of another set of this file (line "
                                  f"{other}): its scaling commits would be read as both sets' "
                                  "history; remove it from previousNames, or rename that set",
                                  line)
            if previous in claimed:
                owner = sets[claimed[previous]].name
                first = document.line_of(["runnerSets", claimed[previous], "previousNames"])
                raise ConfigError(config_path, f"runner set {runner_set.name!r}: previousNames: "
                                  f"{previous!r} is also a previous name of set {owner!r} (line "
                                  f"{first}): a name's scaling commits are one set's history; "
                                  "keep it on the set that took over its runners", line)


def _top_key_line(text: str, key: str) -> int | None:
    """The line of a top-level ``key:`` found in the text (Document.line_of would build the
    node tree of the whole file: minutes and gigabytes for 200,000 sets)."""
    found = re.search(rf"^{re.escape(key)}\s*:", text, re.MULTILINE)
    return text.count("\n", 0, found.start()) + 1 if found else None


LineRef = Union[int, None, Callable[[], Optional[int]]]


def _line(line: LineRef) -> int | None:
    return line() if callable(line) else line


def load_preset(root: Path | None, name: str, source: str, line: LineRef,
                read: PresetReader | None = None) -> Policy:
    """A named policy: the config repo's ``policies/NAME.yaml`` first, then gitscale's own.
    ``read`` (with ``root`` None): the file as a commit has it (``config_from_commit``)."""
    from importlib import resources

    label = f"policies/{name}.yaml"
    if root is None:
        text = read(name) if read is not None else None
    else:
        text = _local_preset(root, name, label, source, line)
    if text is None:
        shipped = resources.files("gitscale.presets").joinpath(f"{name}.yaml")
        try:
            known = shipped.is_file()
        except (OSError, ValueError):  # (a name longer than a file's)
            known = False
        if not known:
            raise ConfigError(source, f"unknown policy preset {shown(name)} (shipped: "
                              f"{', '.join(preset_names())})", _line(line))
        label = f"preset {name}"
        text = shipped.read_text(encoding="utf-8")
    document = load_single(text, label, ConfigError)
    check_schema(document, "POLICY", label, ConfigError)
    return build_policy(document.data, document, [], label)


def _local_preset(root: Path, name: str, label: str, source: str, line: LineRef) -> str | None:
    """The text of ``root``'s ``policies/NAME.yaml``; None when it has no such file."""
    local = root / "policies" / f"{name}.yaml"
    try:
        for path, where in ((local.parent, "policies"), (local, label)):
            if path.is_symlink():  # as for manifests: a link could point anywhere
                raise ConfigError(where, "is a symlink (gitscale reads only regular files in "
                                  "the config repo)")
        is_file = local.is_file()
    except (OSError, ValueError):  # a name no file can have (too long; simulate's --policy)
        raise ConfigError(source, f"unknown policy preset {shown(name)} (shipped: "
                          f"{', '.join(preset_names())})", _line(line)) from None
    if not is_file:  # (a folder of that name is not a preset: the shipped one applies)
        return None
    try:
        return files.read_text(local, label, ConfigError)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(label, f"cannot be read: {exc}") from None


def preset_names() -> list[str]:
    from importlib import resources

    return sorted(p.name[:-5] for p in resources.files("gitscale.presets").iterdir()
                  if p.name.endswith(".yaml"))


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def relative_path(relative: str, source: str, error: type[ConfigError] | Any,
                  line: LineRef = None) -> PurePosixPath:
    """``relative`` as a path inside the repo, or ``error``: absolute, ``..``, ``~``, a
    control character, the top folder, or inside ``.git``."""
    if _CONTROL.search(relative):  # a NUL no file name holds; a newline, a tab: a typo
        raise error(source, f"{shown(relative)} holds a control character (a line break, a "
                    "tab, a NUL); name a file of the config repo", _line(line))
    pure = PurePosixPath(relative)
    if pure.is_absolute() or "\\" in relative or ".." in pure.parts or relative.startswith("~"):
        raise error(source, f"{shown(relative)} must be a path inside the config repo",
                    _line(line))
    if not pure.parts:
        raise error(source, f"{relative!r} is the repo's top folder, not a file", _line(line))
    if ".git" in pure.parts:
        raise error(source, f"{relative!r} is inside .git (git's own files); name a file the "
                    "repo tracks", _line(line))
    return pure


def safe_repo_path(root: Path, relative: str, source: str, error: type[ConfigError] | Any,
                   line: LineRef = None, checked: set[Path] | None = None) -> Path:
    """``root/relative``, refusing absolute paths, ``..`` escapes and symlinks on the way.

    A manifest reached through a symlink could point anywhere on the machine running gitscale;
    git would also commit the link, not the file we edited.
    """
    pure = relative_path(relative, source, error, line)
    # Relative, no "..", no symlink on the way: the path cannot leave the repo.
    current = root
    for depth, part in enumerate(pure.parts, start=1):
        current = current / part
        is_dir = depth < len(pure.parts)
        if is_dir and checked is not None and current in checked:
            continue  # a thousand manifests in one folder: check the folder once
        if os.path.islink(current):
            raise error(source, f"{relative!r} goes through a symlink ({current.relative_to(root)}); "
                        "gitscale edits only regular files inside the config repo", _line(line))
        if is_dir and checked is not None:
            checked.add(current)
    return current
