"""Reading the files people point gitscale at: regular files only, of a bounded size; and
writing gitscale's own cache files (``write_cache``).

``open()`` on a FIFO waits for a writer that may never come, and ``/dev/zero`` never ends: both
hung or exhausted memory when found in the config repo (a manifest, a ``source: {file: …}``) or
given as ``--demand``. The file is opened without blocking, checked with ``fstat`` on the open
descriptor (no window between check and read), and read to at most ``MAX_BYTES``. Only what the
user hands over on the command line on purpose — ``--demand -`` (standard input) or a pipe
(``--demand <(…)``, a FIFO named there) — is read as a stream (``read_stream``): once, to at
most ``MAX_BYTES`` too.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Callable

from gitscale.errors import InputError

MAX_BYTES = 64 * 1024 * 1024  # a 100,000-set gitscale.yaml or a million-job demand file fit
# Whether this process has said that its cache cannot be written: once is enough for a loop
# that would otherwise repeat it every pass (process state, on purpose).
_cache_warned: list[str] = []
# Where this module's warnings go (a cache file not loaded, the cache not written): stderr as
# they are, or a long-running command's log (``warn_through``: `run`, `serve` and the
# controller give ``logline.warn``, an object of level warning in a JSON log); ``logline`` is
# of this module's layer, so it is given, not imported.
_warn_with: list[Callable[[str], None]] = []
_distrust_warned: list[str] = []  # (a cache file not loaded: said once)
# The cache directories whose stale temporary files this process has removed (once each).
_swept: set[str] = set()
# write_cache's temporary files: ``.NAME.PID.RANDOM.tmp`` (``.NAME.PID.tmp`` before 0.1.0)
_CACHE_TMP = re.compile(r"^\..+\.\d+(\.[^./]+)?\.tmp$")
STALE_TMP = 3600.0  # seconds: a temporary cache file this old is a killed writer's


def read_bytes(path: Path, label: str, error: type[InputError], *,
               limit: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file at ``path``. Raises ``error`` naming ``label`` for
    anything else (a FIFO, a device, a socket, a file over ``limit``); FileNotFoundError and
    IsADirectoryError are left to the caller, which knows what the file was for."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise error(label, f"is not a regular file ({_kind(info.st_mode)}); gitscale "
                        "reads only regular files")
        if info.st_size > limit:
            raise error(label, f"is {info.st_size:,} bytes; gitscale reads files of at most "
                        f"{limit:,} bytes")
        return _read_at_most(fd, label, error, limit)  # (the file may grow while we read it)
    finally:
        os.close(fd)


def read_stream(fd: int, label: str, error: type[InputError], *,
                limit: int = MAX_BYTES) -> bytes:
    """The bytes of the open descriptor ``fd`` up to its end, whatever it is (standard input,
    a pipe, a FIFO named on the command line): for input the user hands gitscale on the
    command line, read once, never for files of the config repo (``read_bytes``). More than
    ``limit`` bytes (``< /dev/zero``) raise ``error`` naming ``label`` once ``limit`` + 1 are
    read: memory stays bounded. It waits for the writer as ``cat`` does."""
    return _read_at_most(fd, label, error, limit)


def _read_at_most(fd: int, label: str, error: type[InputError], limit: int) -> bytes:
    chunks = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise error(label, f"is larger than {limit:,} bytes (gitscale's limit)")
    return b"".join(chunks)


def read_text(path: Path, label: str, error: type[InputError], *,
              limit: int = MAX_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8 (newlines untouched: CRLF stays CRLF); text that is not
    UTF-8 raises ``error`` at its line (``decode``)."""
    return decode(read_bytes(path, label, error, limit=limit), label, error)


def decode(data: bytes, label: str, error: type[InputError]) -> str:
    """``data`` as UTF-8 text. A file saved in another encoding (Latin-1, UTF-16) raises
    ``error`` naming ``label``, the line and the column of its first byte that is not UTF-8,
    not Python's byte offset into the file."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        utf16 = " (it looks like UTF-16)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise error(label, f"is not UTF-8 text: byte 0x{data[exc.start]:02x} at column "
                    f"{column}{utf16}; save the file as UTF-8", line) from None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what ``mkdir -p`` would
    create, and what a command that failed half-way removes); None when ``path`` exists."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists() or folder.is_symlink():
            break
        missing = folder
    return missing


FILE_SUFFIX = "_FILE"  # NAME_FILE names the file NAME's value is read from


def variable_file(name: str) -> str | None:
    """The ``_FILE`` convention (Docker's official images, and many tools): the path
    ``NAME_FILE`` gives, when ``NAME``'s value is to be read from that file; None when
    ``NAME_FILE`` is unset or empty (``NAME`` itself is read). Both set is refused, naming both
    (an ``InputError``, never a value): which one is current cannot be guessed, and a stale
    file silently winning over a fresh variable (or the reverse) is worse than a clear error.
    A ``NAME`` set but empty counts as unset, as Docker's images count it (a CI secret that
    does not exist expands to "")."""
    path = os.environ.get(name + FILE_SUFFIX, "")
    if not path:
        return None
    if os.environ.get(name, "").strip():
        raise InputError(f"{name}{FILE_SUFFIX}", f"{name} is set too: set one of the two "
                         f"({name}_FILE names a file holding {name}'s value)")
    return path


# Where the in-cluster scaler `gitscale init --run-in cluster` writes mounts the Secret
# gitscale-NAME, one file per key: at SECRET_MOUNTS/NAME/KEY.
SECRET_MOUNTS = "/var/run/secrets/gitscale"


def mounted_secret_hint(path: Path) -> str:
    """" (the key "KEY" of Secret gitscale-NAME?)" for a file of ``SECRET_MOUNTS`` that is
    missing (a Secret not created yet, or without that key: the volume is optional), else
    nothing."""
    if str(path.parent.parent) != SECRET_MOUNTS:
        return ""
    return f' (the key "{path.name}" of Secret gitscale-{path.parent.name}?)'


def default_cache_dir() -> Path | None:
    """Where gitscale keeps what it remembers between runs (the state cache, compiled schemas,
    tokens): ``$GITSCALE_CACHE_DIR`` (empty: nowhere), else ``$XDG_CACHE_HOME/gitscale`` or
    ``~/.cache/gitscale``."""
    configured = os.environ.get("GITSCALE_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None  # empty: no disk cache
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gitscale"


class UntrustedCache(Exception):
    """A cache file that someone else could have written: it is not loaded."""


def read_cache(path: Path) -> bytes | None:
    """The bytes of one of gitscale's cache files; None when there is none. Raises
    ``UntrustedCache`` for a file that is not a regular file owned by this user, or that anyone
    may write: the caches are pickles and marshalled code, which run what they hold when
    loaded, so a file another user could have put there (a cache directory shared too widely)
    is never loaded, and the pass runs as without it. A file only its group may write passes:
    a volume mounted with an ``fsGroup`` is made group-writable by Kubernetes on each mount."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedCache(f"{path} is a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedCache(f"{path} is not a regular file")
        if info.st_uid != os.geteuid():
            raise UntrustedCache(f"{path} belongs to another user (uid {info.st_uid})")
        if info.st_mode & stat.S_IWOTH:
            raise UntrustedCache(f"{path} may be written by anyone (mode "
                                 f"{stat.S_IMODE(info.st_mode):04o})")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def load_cache(path: Path | None) -> bytes | None:
    """``read_cache`` for a loader that goes on without the file: None when there is no file,
    it cannot be read, or it is not to be trusted (said once per process, on stderr)."""
    if path is None:
        return None
    try:
        return read_cache(path)
    except UntrustedCache as exc:
        if not _distrust_warned:
            _distrust_warned.append(str(path))
            _warn(f"not loading gitscale's cache file {exc}: its caches run code when "
                  "loaded, so only files of this user that no one else may write are read. "
                  "Remove it, or set GITSCALE_CACHE_DIR to a directory of this user's own; "
                  "meanwhile every run starts without it (slower, never wrong).")
        return None
    except OSError:
        return None


def write_cache(path: Path, write: Callable[[IO[bytes]], object]) -> bool:
    """Write one of gitscale's cache files: ``write`` fills a temporary file beside ``path``
    (mode 0600: tokens' and private repos' data), which then replaces ``path`` at once, so a
    reader never sees half a file. False when that fails (a read-only or full disk, a path
    under a file): the temporary file is removed, the process says so once on stderr (naming
    the directory and the error, no traceback), and the caller goes on without its cache —
    slower, never wrong. (A CronJob on a full volume would otherwise run cold on every pass,
    silently, leaving a zero-byte temporary file each time.)

    The temporary file's name is the writer's own (``mkstemp``), not only its process number:
    two threads saving one file (serve's resync and its shutdown), or two processes of one
    number in two containers sharing the cache volume (each PID 1), wrote one file at once.
    The first write of a process in a directory also removes the temporary files that writers
    killed mid-write left there (``sweep_stale``)."""
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path.parent)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                                    dir=path.parent)  # 0600, O_EXCL
        tmp = Path(name)
        try:
            os.fchmod(fd, 0o600)  # whatever mkstemp did: the bodies are owner-only
            with os.fdopen(fd, "wb") as out:
                fd = -1  # closed by the file object from here on
                write(out)
        finally:
            if fd >= 0:
                os.close(fd)
        os.replace(tmp, path)
        _cache_warned.clear()  # written again: a later failure is said anew
        return True
    except BaseException as exc:
        try:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        except OSError:
            pass  # the directory itself is gone or unreadable: nothing was left in it
        if not isinstance(exc, OSError):
            raise  # a bug in ``write``: not a cache failure, but no file left behind either
        cache_write_failed(path.parent, exc)
        return False


def sweep_stale(directory: Path, older_than: float = STALE_TMP) -> None:
    """Remove ``write_cache``'s temporary files in ``directory`` that are older than
    ``older_than`` seconds (no write takes that long: a writer killed mid-write left them);
    once per process and directory. By age, not by process number: a cache volume may be
    shared by containers whose process numbers mean different things."""
    if str(directory) in _swept:
        return
    _swept.add(str(directory))
    cutoff = time.time() - older_than
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if _CACHE_TMP.match(entry.name) and entry.is_file(follow_symlinks=False) \
                        and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
    except OSError:
        pass  # another process removed it first, or the directory is not readable: no harm


def keep_newest(directory: Path, pattern: str, keep: int) -> None:
    """Remove all but the ``keep`` newest files (by mtime) of ``directory`` matching
    ``pattern``. Another process may prune the same directory at the same moment (processes
    sharing a cache): a file gone between the listing and its ``stat`` is already pruned, not
    an error (it crashed `plan` and `reconcile`, exit 70, after the pass had pushed)."""
    dated: list[tuple[float, Path]] = []
    try:
        for path in directory.glob(pattern):
            try:
                dated.append((path.stat(follow_symlinks=False).st_mtime, path))
            except FileNotFoundError:
                continue
    except OSError:
        return  # the directory is gone or unreadable: nothing to prune
    dated.sort(key=lambda entry: entry[0])
    for _, old in dated[:-keep] if keep else dated:
        try:
            old.unlink(missing_ok=True)
        except OSError:
            pass  # not ours to remove after all (permissions): only a larger cache


def cache_write_failed(directory: Path, exc: OSError) -> None:
    """Say that the cache in ``directory`` cannot be written, and why: once until a write
    succeeds again (a loop whose disk fills up again months later says so again)."""
    if _cache_warned:
        return
    _cache_warned.append(str(directory))
    why = exc.strerror or type(exc).__name__
    _warn(f"cannot write gitscale's cache in {directory}: {why}; the next process (a "
          "restart, the next CronJob run) starts without what this one learns (slower, never "
          "wrong). Free space or make it writable, or set GITSCALE_CACHE_DIR to another "
          "directory (empty: no disk cache).")


def warn_through(say: Callable[[str], None]) -> None:
    """Say this module's warnings through ``say`` (given ``message``, without ``warning: ``)
    from now on in this process."""
    _warn_with[:] = [say]


def _warn(message: str) -> None:
    if _warn_with:
        _warn_with[0](message)
        return
    import click

    click.echo(f"warning: {message}", err=True)
