"""The credential files `gitscale init`'s printed steps (and deploy/scaler/README.md,
docs/credentials.md) have the user write into the config repo's folder, each read by a
``kubectl create secret --from-file`` or a ``gh``/``glab`` secret command: init lists them in
the repo's ``.gitignore`` (adding to one that is there, never dropping a line), so that the
obvious ``git add -A && git commit && git push`` of the scaffold does not publish them to
everyone who reads the repo (Argo CD, Flux, each reviewer), and `gitscale validate` refuses a
repo that tracks one."""
from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import PurePosixPath

GITIGNORE = ".gitignore"

# every ``./NAME`` a printed step or the docs have the user create (tests/commands/
# test_init_ignore.py reads them all out of init's output and the docs and checks this list)
CREDENTIAL_FILES = (
    "config-repo-read-token",  # Argo CD's / Flux's read-only token for the config repo
    "git-push-token",  # the scaler's token that pushes to the config repo
    "github-source-token",  # the GitHub source's token
    "github-app.private-key.pem",  # the GitHub App's private key
    "github-controller-token",  # the controller's GitHub token
    "buildkite-agent-token",  # the agent token Buildkite runners register with
    "buildkite-api-token",  # the controller's Buildkite REST token (read_agents)
    "buildkite-graphql-token",  # the Buildkite source's optional jobIds token
    "webhook-secret",  # serve's GitHub webhook secret
    "flux-receiver-token",  # Flux's Receiver token (notify)
    "argocd-webhook-secret",  # Argo CD's webhook secret (notify)
)
# and what a step has the user bring under its own name: a GitHub App's private key as GitHub
# downloads it, ``<app slug>.<YYYY-MM-DD>.private-key.pem`` (step 3: "the .pem as downloaded")
CREDENTIAL_PATTERNS = ("*.private-key.pem",)

HEADER = """\
# Credential files `gitscale init`'s steps have you write here to create Kubernetes Secrets and
# CI secrets from: never commit them (anyone who can read this repo, Argo CD and Flux too,
# would read them). Delete them once the Secrets exist.
"""


def gitignore_text(existing: str | None) -> str | None:
    """The ``.gitignore`` init leaves: ``existing`` (None: there is none) with the credential
    files it lacks added below it, every line of it kept; None when it lists them all."""
    have = {line.strip() for line in (existing or "").splitlines()}
    missing = [name for name in CREDENTIAL_FILES + CREDENTIAL_PATTERNS
               if not {name, f"/{name}", f"**/{name}"} & have]
    if not missing:
        return None
    block = HEADER + "".join(f"{name}\n" for name in missing)
    if not existing:
        return block
    return existing + ("" if existing.endswith("\n") else "\n") + "\n" + block


def tracked_credentials(paths: list[str]) -> list[str]:
    """Of ``paths`` (the files git tracks), those named as a credential file of init's steps."""
    return [path for path in paths if PurePosixPath(path).name in CREDENTIAL_FILES
            or any(fnmatchcase(PurePosixPath(path).name, p) for p in CREDENTIAL_PATTERNS)]


# git's word for a file with no ``filter`` of its own (``git check-attr``), and Git LFS's
# filter: its store publishes a file as plainly as the repo does
PLAIN_FILTERS = ("unspecified", "unset", "set", "lfs")


def encrypted(check_attr: str) -> set[str]:
    """Of ``git check-attr -z filter -- PATH…``'s answer (path, ``filter``, value, each ended
    by a NUL), the paths git hands to a filter of their own as it commits them: git-crypt's
    (``filter=git-crypt``), transcrypt's (``filter=crypt``) — a credential encrypted in the
    repo, tracked on purpose."""
    fields = check_attr.split("\0")
    return {fields[at] for at in range(0, len(fields) - 2, 3)
            if fields[at + 2] not in PLAIN_FILTERS}
