"""A commit without the index: the edited files of a sparse clone in one ``git fast-import``.

``git commit`` in a clone of ten thousand manifests reads, refreshes and rewrites a ten
thousand entry index (and ``update-index`` wrote it just before) to change ten entries.
``fast-import`` writes the blobs, the trees on the changed paths and the commit, and moves the
branch, in one process that reads nothing else. The commit is the one ``git commit --no-verify
--file=-`` makes: the same identity and dates (from the same environment), the message cleaned
up the same way, no hooks. Where the configuration would make ``git commit`` do more (sign,
re-encode or clean up the message otherwise, run hooks from ``core.hooksPath``),
``commit_files`` declines and the caller commits through the index as before.

The index and the work tree still show the parent afterwards: a sparse clone reads HEAD's
trees (``repo.index.Tree.read``), and the next sync or take-back resets both.
"""
from __future__ import annotations

import re
from typing import Mapping

from gitscale.repo.git import Git, Started, raw_date

# what makes `git commit` differ from a plain fast-import commit
_COMMIT_CONFIG = r"^(commit\.gpgsign|commit\.cleanup|i18n\.commitencoding|core\.hookspath)$"
# what git strips from the ends of a name or an email (and c <= " "; "." in some versions)
_CRUD = ".,:;<>\"\\'"


def ask_commit_config(repo: Git) -> Started:
    """Start reading the configuration that would make ``git commit`` differ, for
    ``commit_files``: a pass starts it before it validates its edits, which take longer than
    git takes to answer (one process less to wait for)."""
    return repo.start("config", "--get-regexp", _COMMIT_CONFIG)


def commit_files(repo: Git, files: Mapping[str, tuple[str, bytes]], message: str, *,
                 parent: str, branch: str, date: str | None = None,
                 config: Started | None = None) -> str | None:
    """Commit ``files`` (path → (mode, content)) on ``parent`` as the new tip of ``branch``;
    the commit id, or None when ``git commit`` would make a different commit (see above).
    ``config``: ``ask_commit_config``'s read, started earlier; taken here either way."""
    asked = config if config is not None else ask_commit_config(repo)
    if asked.wait(check=False).stdout.strip():
        return None
    env = repo.environment()
    author = _ident(env.get("GIT_AUTHOR_NAME", ""), env.get("GIT_AUTHOR_EMAIL", ""))
    committer = _ident(env.get("GIT_COMMITTER_NAME", ""), env.get("GIT_COMMITTER_EMAIL", ""))
    when = "now" if date is None else raw_date(date)
    if author is None or committer is None or when is None or not files:
        return None
    text = stripspace(message).encode("utf-8")
    stream = bytearray(f"commit refs/heads/{branch}\nmark :1\nauthor {author} {when}\n"
                       f"committer {committer} {when}\n".encode("utf-8"))
    stream += b"data %d\n%s\nfrom %s\n" % (len(text), text, parent.encode("ascii"))
    for path, (mode, data) in files.items():
        stream += b"M %s inline %s\ndata %d\n%s\n" % (mode.encode("ascii"), quote_path(path),
                                                       len(data), data)
    stream += b"get-mark :1\n"
    out = repo.run_bytes("fast-import", "--quiet", "--cat-blob-fd=1",
                         f"--date-format={'now' if date is None else 'raw'}",
                         input=bytes(stream))
    return out.decode("ascii").strip()


def _ident(name: str, email: str) -> str | None:
    """``Name <email>`` as ``git commit`` writes it; None when git would change or refuse it
    (crud at the ends, a delimiter inside, empty)."""
    for part in (name, email):
        if not part or _crud(part[0]) or _crud(part[-1]) or re.search(r"[<>\n]", part):
            return None
    return f"{name} <{email}>"


def _crud(char: str) -> bool:
    return char <= " " or char in _CRUD


def stripspace(message: str) -> str:
    """The message as ``git commit`` keeps it (``--cleanup=whitespace``): no trailing
    whitespace, no leading or trailing blank lines, runs of blank lines made one, a final
    newline."""
    lines: list[str] = []
    for line in message.split("\n"):
        line = line.rstrip(" \t\r\n")
        if line or (lines and lines[-1]):
            lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    return "".join(line + "\n" for line in lines)


def quote_path(path: str) -> bytes:
    """A path in a fast-import command: C-style quoted, so any name survives."""
    out = bytearray(b'"')
    for byte in path.encode("utf-8", "surrogateescape"):
        if byte in b'"\\':
            out += b"\\" + bytes([byte])
        elif byte < 0x20 or byte == 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')
