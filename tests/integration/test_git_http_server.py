"""The test HTTP git server itself: chunked and gzip'd request bodies reach http-backend intact.

gitscale's own pushes are small (one Content-Length body), so these paths are driven with plain
git: a push larger than http.postBuffer is sent chunked, and a fetch whose negotiation carries
more than 1 KiB of "have" lines is sent gzip'd.
"""
from __future__ import annotations

import base64
import os
from pathlib import Path

from tests.integration import seed
from tests.integration.conftest import make_bare, rev
from tests.integration.git_http import GitHTTPServer


def _git(server: GitHTTPServer, cwd: Path, *args: str) -> str:
    auth = base64.b64encode(f"{server.user}:{server.token}".encode()).decode()
    return seed.git(cwd, "-c", f"http.extraHeader=Authorization: Basic {auth}",
                    "-c", "user.name=T", "-c", "user.email=t@example.com", *args)


def test_chunked_push_and_gzip_fetch(http_git_server: GitHTTPServer, tmp_path: Path) -> None:
    server = http_git_server
    bare = make_bare(server.project_root, "config.git", seed.FILES)
    work = tmp_path / "work"
    _git(server, tmp_path, "clone", "--quiet", server.url(), str(work))

    (work / "blob.bin").write_bytes(os.urandom(1536 * 1024))  # incompressible, > postBuffer
    _git(server, work, "add", "blob.bin")
    _git(server, work, "commit", "--quiet", "-m", "big")
    _git(server, work, "push", "--quiet", "origin", "HEAD:main")
    assert rev(bare) == seed.git(work, "rev-parse", "HEAD")
    assert "chunked" in server.bodies, server.bodies

    unrelated = tmp_path / "unrelated"  # many commits the server has never seen: many "have"s
    seed.git(tmp_path, "init", "--quiet", "--initial-branch=other", str(unrelated))
    for n in range(80):
        _git(server, unrelated, "commit", "--quiet", "--allow-empty", "-m", f"local {n}")
    _git(server, unrelated, "fetch", "--quiet", server.url(), "main")
    assert seed.git(unrelated, "rev-parse", "FETCH_HEAD") == rev(bare)
    assert "gzip" in server.bodies, server.bodies
