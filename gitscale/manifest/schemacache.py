"""fastjsonschema validators compiled once, kept on disk between runs.

Turning a CRD's JSON Schema into a validator (generating Python source, then compiling it) cost
a tenth of a second of every CLI pass that edits a file, for a schema that changes once per
gitscale or CRD version. The compiled code object is kept in the state cache directory
(``$GITSCALE_CACHE_DIR``, see ``gitscale.plan.cache``), in a file named after a hash of what
determines it: the schema, the options, the fastjsonschema version and the Python bytecode
version. The file carries a checksum of its content: a missing, stale, truncated or otherwise
corrupt file is compiled again and rewritten, never trusted and never an error.

The data of gitscale's own CRD, which every validating pass reads, is kept the same way
(``parsed_crd``, ``crd-*.marshal``): the file needs PyYAML, a text keyed by its hash does not.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
from functools import partial
from pathlib import Path
from types import CodeType
from typing import Any, Callable, Mapping

from gitscale.files import keep_newest, load_cache, write_cache

FORMAT = 2  # of the cached files (2: without detailed exceptions)
KEEP = 16  # validator files kept (one per schema version seen); the oldest go first
_MAGIC = b"gitscale-validator\n"
_ENTRY = "validate"  # the function fastjsonschema generates for a schema without an id


def validator(definition: dict[str, Any], formats: Mapping[str, Callable[[Any], bool]],
              directory: Path | None) -> Callable[[Any], Any]:
    """fastjsonschema's validator for ``definition`` (no defaults written into the data);
    compiled from the cache file in ``directory`` when a good one is there."""
    import fastjsonschema

    key = _key(definition, sorted(formats), fastjsonschema.VERSION)
    path = directory / f"validator-{key[:32]}.marshal" if directory is not None else None
    code = _load(path, key) if path is not None else None
    if not isinstance(code, CodeType):
        # Without detailed exceptions (whose payload nobody reads: jsonschema explains a
        # refusal) the generated code is half the size and compiles in a third of the time.
        source = fastjsonschema.compile_to_code(definition, formats=dict(formats),
                                                use_default=False, detailed_exceptions=False)
        code = compile(source, "<gitscale validator>", "exec")
        if path is not None:
            _store(path, key, marshal.dumps(code))
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # noqa: S102 - code fastjsonschema generated from our schema
    function = namespace.get(_ENTRY)
    if not callable(function):  # a schema with its own id names its function otherwise
        return fastjsonschema.compile(definition, formats=dict(formats), use_default=False,
                                      detailed_exceptions=False)
    return partial(function, custom_formats=dict(formats))


def _key(definition: dict[str, Any], formats: list[str], version: str) -> str:
    text = json.dumps([FORMAT, version, importlib.util.MAGIC_NUMBER.hex(), formats,
                       definition], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def parsed_crd(text: str, parse: Callable[[], dict[str, Any]],
               directory: Path | None) -> dict[str, Any]:
    """``parse()``, the data of the CRD ``text`` (gitscale's own, read by every pass that
    validates), kept in ``directory`` between runs: the text is read with PyYAML's events
    (multi-line plain scalars), which with PyYAML's import cost a writing CLI pass ≈ 25 ms;
    loading the kept data costs well under one. Kept in marshal's format, which gives back the
    same types (str, int, float, bool, None, lists, dicts in their order); data it cannot hold
    (a timestamp) is parsed every time. A missing, stale or damaged file is parsed again."""
    key = hashlib.sha256(f"{FORMAT} {importlib.util.MAGIC_NUMBER.hex()}\n{text}".encode()
                         ).hexdigest()
    path = directory / f"crd-{key[:32]}.marshal" if directory is not None else None
    found = _load(path, key) if path is not None else None
    if isinstance(found, dict):
        return found
    data = parse()
    if path is not None:
        try:
            payload = marshal.dumps(data)
        except ValueError:
            return data
        _store(path, key, payload, "crd-*.marshal")
    return data


def _load(path: Path, key: str) -> Any:
    try:
        data = load_cache(path)
        if data is None:
            return None
        magic, stored_key, checksum, payload = data.split(b"\n", 3)
        if magic + b"\n" != _MAGIC or stored_key.decode() != key \
                or hashlib.sha256(payload).hexdigest() != checksum.decode():
            return None
        return marshal.loads(payload)
    except (OSError, ValueError, EOFError, TypeError, UnicodeDecodeError):
        return None


def _store(path: Path, key: str, payload: bytes, pattern: str = "validator-*.marshal") -> None:
    data = _MAGIC + f"{key}\n{hashlib.sha256(payload).hexdigest()}\n".encode() + payload
    if not write_cache(path, lambda out: out.write(data)):
        return  # said once (gitscale.files): made again next time
    keep_newest(path.parent, pattern, KEEP)
