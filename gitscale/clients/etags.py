"""What a GET answered before, kept to ask again with ``If-None-Match``: a 304 (which GitHub
does not count against the rate limit) then reuses the body. In memory, or in a file per API
and credential between runs (a cron job's second pass costs 304s)."""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gitscale.files import load_cache, write_cache

MAX_AGE = 86_400.0  # seconds: an entry no pass has used for a day is dropped on save


@dataclass
class EtagCache:
    """URL → (ETag, JSON body), and the page's ``Link`` header: a 304 need not repeat it
    (GitHub's do; a proxy's may not), and without it the next pages would never be read. No
    credential is stored, but the bodies may describe private repos, so the file is written
    owner-only (0600).

    Every workflow run that ever queued leaves its jobs URL behind; entries no pass has used
    for ``max_age`` are dropped on save, so the file stays the size of what is polled."""

    path: Path | None = None
    entries: dict[str, tuple[str, Any]] = field(default_factory=dict)
    dirty: bool = False
    used: dict[str, float] = field(default_factory=dict)  # URL → when a pass last used it
    links: dict[str, str] = field(default_factory=dict)  # URL → its Link header ("" if none)
    max_age: float = MAX_AGE

    @classmethod
    def load(cls, path: Path | None) -> "EtagCache":
        cache = cls(path)
        data = load_cache(path)
        if data is not None:
            try:
                raw = json.loads(data.decode("utf-8"))
                now = time.time()
                cache.entries = {k: (v[0], v[1]) for k, v in raw.items()}
                cache.used = {k: float(v[2]) if len(v) > 2 else now for k, v in raw.items()}
                # an entry saved without its Link is revalidated by a plain GET (HttpClient._entry)
                cache.links = {k: v[3] for k, v in raw.items()
                               if len(v) > 3 and isinstance(v[3], str)}
            except (OSError, ValueError, TypeError, IndexError, AttributeError):
                cache.entries, cache.used, cache.links = {}, {}, {}  # only a slower pass
        return cache

    def store(self, url: str, etag: str, body: Any, link: str = "") -> None:
        self.entries[url] = (etag, body)
        self.links[url] = link
        self.used[url] = time.time()
        self.dirty = True

    def touch(self, url: str) -> None:
        """``url`` was revalidated. The file is rewritten for this only now and then, so a pass
        of nothing but 304s usually writes nothing."""
        now = time.time()
        if now - self.used.get(url, 0.0) > self.max_age / 24:
            self.used[url] = now
            self.dirty = True

    def forget(self, gone: Callable[[str], bool]) -> None:
        """Drop the entries whose URL ``gone`` says will not be asked again (a finished
        run's jobs), rather than keep them for ``max_age``."""
        for url in [u for u in self.entries if gone(u)]:
            del self.entries[url]
            self.used.pop(url, None)
            self.links.pop(url, None)
            self.dirty = True

    def prune(self) -> None:
        oldest = time.time() - self.max_age
        for url in [u for u in self.entries if self.used.get(u, 0.0) < oldest]:
            del self.entries[url]
            self.used.pop(url, None)
            self.links.pop(url, None)
            self.dirty = True

    def save(self) -> None:
        self.prune()
        if self.path is None or not self.dirty:
            return
        # The bodies are private repos' run lists (names, branches, commit titles, actors):
        # readable by the owner only, whatever the umask (write_cache: 0600).
        data = json.dumps({k: [*v, round(self.used.get(k, 0.0)), self.links.get(k)]
                           for k, v in self.entries.items()}).encode()
        if write_cache(self.path, lambda out: out.write(data)):
            self.dirty = False


def cache_file(cache_dir: Path | None, api: str, identity: str) -> Path | None:
    """Where one API+credential's cache lives; the credential only enters as a hash."""
    if cache_dir is None:
        return None
    digest = hashlib.sha256(f"{api}\0{identity}".encode()).hexdigest()[:16]
    return cache_dir / f"etags-{digest}.json"
