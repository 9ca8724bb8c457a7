"""Fast, read-only YAML loading that remembers where every value came from.

Reading is the hot path (a pass may read a thousand manifests), so it uses libyaml through
PyYAML's C loader. Writing never goes through here: see ``gitscale.manifest.edit``.
Errors name the file and the 1-based line of the offending key or value.
"""
from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Sequence

from gitscale.errors import InputError

if TYPE_CHECKING:
    import yaml

# PyYAML (and yamlio.fast, which uses it) are imported where a text is parsed, not here: a warm
# pass whose config and manifests come from the state cache parses no YAML, and importing
# PyYAML costs about 25 ms of a CLI start.

Path = Sequence["str | int"]


def _loader() -> Any:
    """libyaml's loader: the fast path; the pure loader gives identical results, only slower."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _strict_loader() -> Any:
    """libyaml's loader, refusing duplicate keys (PyYAML would silently keep the last one)."""
    import yaml

    class StrictLoader(_loader()):  # type: ignore[misc]
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
            seen: set[str] = set()
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key.value!r}", key.start_mark)
                    seen.add(key.value)
            return super().construct_mapping(node, deep)

    StrictLoader.add_constructor("tag:yaml.org,2002:map", StrictLoader.construct_yaml_map)
    return StrictLoader


def __getattr__(name: str) -> Any:
    if name == "_StrictLoader":  # the loader as a name, for the tests that compare with it
        return _strict_loader()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Document:
    """One YAML document's plain data. Line numbers are found on demand: building and keeping
    node trees for every file costs more than parsing them, and only errors need them."""

    __slots__ = ("data", "_text", "_index", "_node", "_shared")

    def __init__(self, data: Any, text: str, index: int) -> None:
        self.data = data
        self._text = text
        self._index = index
        self._node: yaml.Node | None = None
        self._shared: list[list[yaml.Node] | None] | None = None  # ``compose_together``

    @property
    def node(self) -> yaml.Node | None:
        if self._node is None:
            import yaml

            nodes = self._shared[0] if self._shared is not None else None
            if nodes is None:
                try:
                    nodes = list(yaml.compose_all(self._text, Loader=_loader()))
                except yaml.YAMLError:
                    return None
                if self._shared is not None:
                    self._shared[0] = nodes
            self._node = nodes[self._index] if self._index < len(nodes) else None
        return self._node

    @property
    def index(self) -> int:
        """Which document of its text this is."""
        return self._index

    def line_of(self, path: Path) -> int | None:
        """1-based line of the value at ``path`` (or of the deepest ancestor that exists)."""
        node = self.node
        line = node.start_mark.line + 1 if node is not None else None
        for part in path:
            child = _child(node, part)
            if child is None:
                break
            key_node, node = child
            line = (key_node or node).start_mark.line + 1
        return line

    def key_line(self, path: Path, key: object) -> int | None:
        """1-based line of ``key`` inside the mapping at ``path`` (a key YAML did not read as
        a string too: ``None`` is found at ``~:``)."""
        node = self.node
        for part in path:
            child = _child(node, part)
            if child is None:
                return self.line_of(path)
            node = child[1]
        found = _child(node, key) if isinstance(key, str) else _odd_child(node, key)
        if found is None:
            return self.line_of(path)
        return (found[0] or found[1]).start_mark.line + 1

    def odd_key(self) -> tuple[list["str | int"], str, int] | None:
        """The first mapping key in document order that YAML does not read as a string
        (``~``, ``true``, ``123``, a ``? [complex]`` key): its path (down to the mapping that
        holds it), what YAML read (``null '~'``), and its 1-based line. None without one (the usual
        answer, found from the data without composing nodes)."""
        import yaml

        if not unusual(self.data)[0]:
            return None
        stack: list[tuple[yaml.Node | None, list["str | int"]]] = [(self.node, [])]
        while stack:
            node, at = stack.pop()
            if isinstance(node, yaml.MappingNode):
                for key, _ in node.value:
                    if not (isinstance(key, yaml.ScalarNode) and key.tag in _NAMES):
                        if isinstance(key, yaml.ScalarNode):  # its kind: null, bool, int…
                            read = f"{key.tag.rsplit(':', 1)[-1]} {key.value!r}"
                        else:
                            read = "a list or a mapping"
                        return at, read, int(key.start_mark.line) + 1
                stack.extend((v, [*at, k.value]) for k, v in reversed(node.value))
            elif isinstance(node, yaml.SequenceNode):
                stack.extend((v, [*at, i]) for i, v in reversed(list(enumerate(node.value))))
        return None

    def entry_line(self, path: Path, key: str, value: str) -> int | None:
        """1-based line of the first ``key: value`` (both scalars) anywhere inside the value at
        ``path``, in document order; None without one (``{env: NAME}`` in a source: where the
        name is written)."""
        import yaml

        node = self.node
        for part in path:
            child = _child(node, part)
            if child is None:
                return None
            node = child[1]
        stack = [node] if node is not None else []
        while stack:
            node = stack.pop()
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if (isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)
                            and k.value == key and v.value == value):
                        return int(k.start_mark.line) + 1
                stack.extend(v for _, v in reversed(node.value))
            elif isinstance(node, yaml.SequenceNode):
                stack.extend(reversed(node.value))
        return None


_STR = "tag:yaml.org,2002:str"
# keys that are names to the loader: a string, and a merge key `<<` (its mapping's keys merged
# in, checked where they are written)
_NAMES = (_STR, "tag:yaml.org,2002:merge")


def unusual(data: Any) -> tuple[bool, bool]:
    """Does ``data`` hold a mapping key that is not a string (``odd_key``), a float? One walk
    for both — a file's usual answer is (False, False), and a 10,000-set config is walked
    whole to give it —, by exact type: YAML gives plain dicts, lists and floats."""
    odd = floats = False
    stack = [data]
    pop, extend = stack.pop, stack.extend
    while stack and not (odd and floats):
        value = pop()
        kind = type(value)
        if kind is dict:
            if not odd:
                odd = any(type(key) is not str for key in value)
            extend(value.values())
        elif kind is list:
            extend(value)
        elif kind is float:
            floats = True
    return odd, floats


def _odd_child(node: yaml.Node | None, key: object) -> tuple[yaml.Node | None, yaml.Node] | None:
    """The entry of a mapping node whose key YAML read as ``key``, not a string."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return None
    reader = yaml.SafeLoader("")
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.tag != _STR:
            value = reader.construct_object(k)
            if value == key and type(value) is type(key):
                return k, v
    return None


def _child(node: yaml.Node | None, part: "str | int") -> tuple[yaml.Node | None, yaml.Node] | None:
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key, value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            return None, node.value[part]
    return None


MAX_DEPTH = 1000  # libyaml's C composer recurses per level: far deeper overflows the C stack


def check_depth(text: str, source: str, error: type[InputError] = InputError) -> None:
    """Refuse YAML nested deeper than ``MAX_DEPTH`` before anything composes it: a line of
    200,000 ``[`` takes the process down with a segfault, not an exception."""
    # Every level opens with one of these characters, so a text with few of them is shallow.
    if sum(text.count(c) for c in "[{-:?") <= MAX_DEPTH:
        return
    import yaml

    depth = 0
    try:
        for event in yaml.parse(text, Loader=_loader()):  # libyaml's parser does not recurse
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    raise error(source, f"nested more than {MAX_DEPTH} levels deep",
                                mark.line + 1 if mark is not None else None)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return  # not YAML at all: the loader reports it with its line


MAX_ALIAS_NODES = 100_000  # values aliases may add: a shared policy used by a thousand sets fits
_ALIAS = re.compile(r"(?:^|[\s,\[{])\*[^\s,\]}]")


def check_aliases(text: str, source: str, error: type[InputError] = InputError) -> None:
    """Refuse YAML whose aliases expand to more than ``MAX_ALIAS_NODES`` values (a "billion
    laughs": nine lines that every later step — schema checks, diffs — would walk as billions
    of values). Counted on parser events, so the count itself costs one pass over the text."""
    if not _ALIAS.search(text):
        return
    import yaml

    sizes: dict[str, int] = {}  # anchor → the values it stands for
    open_nodes: list[list[Any]] = []  # [anchor, values so far] per open mapping/sequence
    added = 0
    try:
        for event in yaml.parse(text, Loader=_loader()):
            if isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor or "", 1)
                added += size
                if added > MAX_ALIAS_NODES:
                    mark = event.start_mark
                    raise error(source, f"aliases expand to more than {MAX_ALIAS_NODES:,} "
                                "values; write the values out, or use fewer aliases",
                                mark.line + 1 if mark is not None else None)
            elif isinstance(event, yaml.ScalarEvent):
                size = 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                open_nodes.append([event.anchor, 1])
                continue
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, size = open_nodes.pop()
                if anchor:
                    sizes[anchor] = size
            else:
                continue
            if open_nodes:
                open_nodes[-1][1] += size
    except yaml.YAMLError:
        return  # not YAML at all: the loader reports it with its line


def compose_together(documents: list[Document]) -> None:
    """The documents of one text, each of which may be asked for lines (a command saying
    something of each, ``validate``): composed once, when the first is asked, for them all —
    each composes the whole text for its own node otherwise (a file of a thousand documents,
    a warning each: a thousand compositions of it). Their nodes are then kept while any of
    them is: for a command's documents, not for those a long-running pass keeps."""
    holder: list[list[Any] | None] = [None]
    for document in documents:
        document._shared = holder


def load_documents(text: str, source: str, error: type[InputError] = InputError) -> list[Document]:
    """Parse every document in ``text``. Raises ``error`` naming ``source`` and the line."""
    from gitscale.yamlio import fast as yamlfast

    try:
        datas = yamlfast.load_all(text)  # JSON, the line reader, libyaml's events: the same data
    except yamlfast.Unsupported:
        pass  # (nesting deeper than MAX_DEPTH included: check_depth words the error)
    else:
        return [Document(data, text, index) for index, data in enumerate(datas)]
    import yaml

    check_depth(text, source, error)
    check_aliases(text, source, error)
    try:
        datas = list(yaml.load_all(text, Loader=_strict_loader()))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise error(source, f"not valid YAML: {problem}" if "duplicate key" not in problem
                    else problem, line) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow: at its line
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        what = f"U+{exc.character:04X}" if isinstance(exc.character, int) else "a character"
        raise error(source, f"not valid YAML: {what} is not allowed ({exc.reason})",
                    line) from None
    except yaml.YAMLError as exc:
        raise error(source, f"not valid YAML: {exc}") from None
    except (ValueError, OverflowError) as exc:
        # a constructor refusing a value the scanner accepted: a 5,000-digit integer, the
        # timestamp 2026-02-30
        raise error(source, f"not valid YAML: {exc}") from None
    return [Document(data, text, index) for index, data in enumerate(datas)]


def load_single(text: str, source: str, error: type[InputError] = InputError) -> Document:
    documents = [d for d in load_documents(text, source, error) if d.data is not None]
    if len(documents) != 1:
        raise error(source, f"expected one YAML document, found {len(documents)}")
    return documents[0]


def format_path(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"
