"""`gitscale init`: what it was told, checked before anything is written.

Whatever init cannot know and was not given becomes ``CHANGE-ME`` inside the value (one
spelling, ``gitscale.yamlio.placeholders``), never a plausible-looking default: the config
repo's URL, the GitHub organization (or the Buildkite organization), a GitHub App's ids. What it
can default safely has a default: github.com, the in-cluster Argo CD destination, the
``ci-runners`` namespace, the Buildkite queue ``default``, the ``clusters/prod`` folder.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import urlsplit

from gitscale.config import DEFAULT_CONFIG
from gitscale.errors import InputError
from gitscale.redact import has_credentials, redact
from gitscale.repo.git import Git
from gitscale.yamlio.placeholders import PLACEHOLDER

GITHUB = "https://github.com"
ARGOCD_IN_CLUSTER = "https://kubernetes.default.svc"
RUNNERS_NAMESPACE = "ci-runners"  # the RunnerSets, their Secrets and runner pods
SYSTEM_NAMESPACE = "gitscale-system"  # the controller and the in-cluster scaler
REPO_URL_PLACEHOLDER = f"https://{PLACEHOLDER}/gitscale-config.git"
REPO_URL_HINT = "the config repo's clone URL (gitscale init --repo-url)"

Platform = Literal["github", "buildkite"]
GitOps = Literal["argocd", "flux"]
RunIn = Literal["github-actions", "gitlab", "cluster"]
RUN_IN: tuple[RunIn, ...] = ("github-actions", "gitlab", "cluster")
DEFAULT_BRANCH = "main"  # a new repo's branch when --branch is not given

_ORG = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")  # the github source's schema says the same
_SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")  # a Buildkite organization slug
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a Kubernetes namespace (RFC 1123)
_ID = re.compile(r"[1-9][0-9]{0,19}")
_QUEUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Choices:
    gitops: GitOps
    repo_url: str  # REPO_URL_PLACEHOLDER when not given
    branch: str
    path: str  # the cluster's folder in the config repo
    platform: Platform
    namespace: str = RUNNERS_NAMESPACE
    cluster: str = ARGOCD_IN_CLUSTER  # Argo CD's destination: a server URL or a cluster name
    github_server: str = GITHUB
    github_org: str = PLACEHOLDER
    github_app: tuple[str, str] | None = None  # (app id, installation id); None: a token
    buildkite_org: str = PLACEHOLDER
    buildkite_queue: str = "default"
    run_in: RunIn = "github-actions"  # the one place gitscale runs from (one scheduler)
    run_in_from: str | None = None  # the --repo-url host run_in was chosen by; None: given
    public_repo: bool = False  # True: Argo CD / Flux read the config repo without a credential
    notify_url: str | None = None  # the engine's address for notify; None: init's default
    config: str = DEFAULT_CONFIG  # the config file's path in the repo (every command's --config)

    @property
    def config_option(self) -> list[str]:
        """``--config PATH`` for the commands init writes, when the file is not the default."""
        return [] if self.config == DEFAULT_CONFIG else ["--config", self.config]

    @property
    def config_flag(self) -> str:
        """``config_option`` for a command line in a text: " --config PATH", or nothing."""
        return "".join(f" {word}" for word in self.config_option)

    @property
    def repo_url_given(self) -> bool:
        return self.repo_url != REPO_URL_PLACEHOLDER

    @property
    def config_url(self) -> str:
        """The RunnerSet's spec.github.configURL: the organization's page on its server."""
        return f"{self.github_server}/{self.github_org}"


def choose(*, gitops: str, repo_url: str | None, branch: str, path: str,
           platform: str | None = None, namespace: str = RUNNERS_NAMESPACE,
           cluster: str | None = None, github_url: str | None = None,
           github_org: str | None = None, github_app_id: str | None = None,
           github_app_installation_id: str | None = None, buildkite_org: str | None = None,
           buildkite_queue: str | None = None, run_in: str | None = None,
           public_repo: bool = False, notify_url: str | None = None,
           config: str = DEFAULT_CONFIG) -> Choices:
    """The options of `gitscale init`, checked; an error names the option. ``branch``: the
    one ``branch_of`` chose."""
    url = repo_url or REPO_URL_PLACEHOLDER
    if repo_url is not None:
        _https_url(repo_url)
    _no_credentials("--repo-url", url)
    _relative("--path", path)
    _relative("--config", config)
    if config.endswith("/") or Path(config).name in ("", "."):
        raise InputError("--config", f"{config!r}: the path of a file, e.g. gitscale.yaml")
    config = str(PurePosixPath(config))  # ./a//b.yaml: a/b.yaml, as init writes and compares it
    if Git(Path.cwd()).run("check-ref-format", "--branch", branch, check=False).code != 0:
        raise InputError("--branch", f"{branch!r} is not a valid git branch name")
    github = {"--github-url": github_url, "--github-org": github_org,
              "--github-app-id": github_app_id,
              "--github-app-installation-id": github_app_installation_id}
    buildkite = {"--buildkite-org": buildkite_org, "--buildkite-queue": buildkite_queue}
    chosen = _platform(platform, [k for k, v in github.items() if v is not None],
                       [k for k, v in buildkite.items() if v is not None])
    if not _LABEL.fullmatch(namespace) or len(namespace) > 63:
        raise InputError("--namespace", f"{namespace!r} is not a Kubernetes namespace name "
                         "(lower-case letters, digits and '-')")
    if namespace == SYSTEM_NAMESPACE:
        raise InputError("--namespace", f"the controller's own namespace {SYSTEM_NAMESPACE} "
                         "cannot hold the runners; pick another")
    if cluster is not None and gitops == "flux":
        raise InputError("--cluster", "Flux applies to the cluster it runs in: install Flux "
                         "there (for a remote cluster, see spec.kubeConfig of Flux's "
                         "Kustomization); --cluster is for Argo CD")
    if cluster is not None and (not cluster or any(c.isspace() for c in cluster)):
        raise InputError("--cluster", f"{cluster!r}: an Argo CD cluster name or server URL")
    if cluster is not None:
        _no_credentials("--cluster", cluster)
    if notify_url is not None:
        _engine_url(notify_url)
    if github_app_installation_id is not None and github_app_id is None:
        # the installation id alone would have init write and print the App's id as CHANGE-ME
        # (a pasted `kubectl create secret` would store that as the id); the id alone is
        # fine: the installation is looked up
        raise InputError("--github-app-installation-id", "needs --github-app-id (the GitHub "
                         "App's numeric id, under the App's settings: App ID); without the "
                         "App, leave both out to poll with a token; nothing was written")
    return Choices(
        gitops="argocd" if gitops == "argocd" else "flux", repo_url=url, branch=branch,
        path=path.strip("/"), platform=chosen, namespace=namespace,
        cluster=cluster or ARGOCD_IN_CLUSTER,
        github_server=_server(github_url) if github_url else GITHUB,
        github_org=_checked(github_org, _ORG, "--github-org", "a GitHub organization"),
        github_app=None if github_app_id is None and github_app_installation_id is None else (
            _checked(github_app_id, _ID, "--github-app-id", "a GitHub App's numeric id"),
            _checked(github_app_installation_id, _ID, "--github-app-installation-id",
                     "the numeric id of the App's installation")),
        buildkite_org=_checked(buildkite_org, _SLUG, "--buildkite-org",
                               "a Buildkite organization slug (lower case)"),
        buildkite_queue=_checked(buildkite_queue or "default", _QUEUE, "--buildkite-queue",
                                 "a queue name (letters, digits, '.', '_', '-')"),
        run_in=_run_in(run_in, repo_url, github_url), public_repo=public_repo,
        run_in_from=None if run_in is not None or repo_url is None else _host(repo_url),
        notify_url=notify_url.rstrip("/") if notify_url else None, config=config,
    )


def _run_in(given: str | None, repo_url: str | None, github_url: str | None) -> RunIn:
    """``--run-in``, or where the config repo lives says: a repo on GitHub (github.com,
    ``*.ghe.com``, the ``--github-url`` server) runs the GitHub workflow, one on a GitLab host
    the GitLab pipeline, one elsewhere (Bitbucket, Gitea, …) the in-cluster scaler, which
    needs no CI of the host's; without ``--repo-url``, the GitHub workflow."""
    if given is not None:
        return next(r for r in RUN_IN if r == given)
    if repo_url is None:
        return "github-actions"
    return _host_runs(_host(repo_url), _host(github_url) if github_url else None)


def _host_runs(host: str, github_host: str | None) -> RunIn:
    """The scheduler a config repo on ``host`` has of its own (see ``_run_in``)."""
    if host in ("github.com", github_host) or host.endswith(".ghe.com"):
        return "github-actions"
    if "gitlab" in host:
        return "gitlab"
    return "cluster"


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def _no_blanks(option: str, url: str) -> None:
    """A URL holds no blank, tab or line break (urlsplit drops line breaks and tabs without a
    word, and init would write the URL as given)."""
    if any(c.isspace() or not c.isprintable() for c in url):
        raise InputError(option, f"{redact(url)!r} holds a blank, a tab or a line break: a URL "
                         "has none; nothing was written")


def _relative(option: str, path: str) -> None:
    """A relative path inside the repo, in characters that need no quoting: it is written
    unquoted into gitscale.yaml, the kustomizations and the schedulers' commands; never in
    .git, git's own folder."""
    if path.startswith("/") or ".." in Path(path).parts:
        raise InputError(option, f"{path!r} must be a relative path inside the repo")
    if ".git" in PurePosixPath(path).parts:
        raise InputError(option, f"{path!r} is inside .git (git's own files); name a path "
                         "the repo tracks")
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", path):
        raise InputError(option, f"{path!r}: use letters, digits, '.', '_', '-' and '/'")


def branch_of(root: Path, given: str | None) -> str:
    """The branch init commits to and Argo CD / Flux follow: in an existing checkout the one
    checked out there (``--branch`` may only repeat it), else ``--branch`` or main. DIR is a
    new directory or the top of a checkout, never a folder inside one."""
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return given or DEFAULT_BRANCH  # DIR is a file: writing it fails with its own error
    repo = Git(existing)
    top = repo.run("rev-parse", "--show-toplevel", check=False)
    if top.code != 0:
        return given or DEFAULT_BRANCH
    where = top.stdout.strip()
    if Path(where).resolve() != root.resolve():
        # the scaffold would be committed under DIR/ of someone's repo, where nothing reads it
        raise InputError(str(root), f"is inside the git checkout {where}, not its top: a "
                         "config repo's gitscale.yaml, workflow and GitOps paths are read from "
                         f"the root. Run init on {where} itself, on a directory outside it, or "
                         f"`git init {root}` first for a repo of its own; nothing was written")
    current = repo.current_branch()
    if current is None:
        raise InputError(str(root), f"the repo at {where} has no branch checked out (a "
                         "detached HEAD); check out the branch Argo CD / Flux should follow "
                         "first; nothing was written")
    if given is not None and given != current:
        raise InputError("--branch", f"{given!r}, but the repo at {where} has {current!r} "
                         "checked out, where init would commit; check out "
                         f"{given!r} first, or leave --branch out to use {current!r}; "
                         "nothing was written")
    return current


def _engine_url(url: str) -> None:
    """``--notify-url``: the GitOps engine's base address, http(s)://HOST[:PORT]; gitscale
    adds the path (Argo CD's /api/webhook, the Receiver's /hook/…)."""
    _base_address("--notify-url", url, not_url=(
        f"{url!r} is not an http(s):// URL (the address of Argo CD's server or Flux's "
        "webhook-receiver)"), has_path=(
        f"{url!r}: give the address alone, no path (gitscale adds Argo CD's /api/webhook or "
        "the Receiver's /hook/…)"))


def _base_address(option: str, url: str, *, not_url: str, has_path: str) -> str:
    """An http(s)://HOST[:PORT] address with nothing after it, no credentials in it:
    ``scheme://netloc``; else an ``InputError`` of ``option`` saying ``not_url`` or
    ``has_path``."""
    _no_credentials(option, url)
    _no_blanks(option, url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or "://" not in url:
        raise InputError(option, not_url)
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise InputError(option, has_path)
    return f"{parts.scheme}://{parts.netloc}"


def _https_url(url: str) -> None:
    """``--repo-url``: an http(s) URL. The scaler pushes over HTTPS with a token (git's
    askpass), Argo CD's repository Secret and Flux's GitRepository read it with a username and
    password, and Flux needs the scheme."""
    _no_blanks("--repo-url", url)
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.hostname and "://" in url:
        return
    if re.match(r"[\w.-]+@[\w.-]+:", url) or parts.scheme == "ssh":
        why = "is an SSH address"
    elif not parts.scheme:
        why = "has no scheme"
    elif parts.scheme in ("http", "https"):
        why = "has no host after the scheme's //"
    else:
        why = f"has the scheme {parts.scheme!r}"
    raise InputError("--repo-url", f"{redact(url)} {why}: give the config repo's "
                     "https:// clone URL, e.g. https://github.com/acme/gitscale-config.git "
                     "(the scaler pushes over HTTPS with a token, Argo CD and Flux read the "
                     "repo over HTTPS with a read-only token, and Flux needs the scheme); "
                     "nothing was written")


def _platform(given: str | None, github: list[str], buildkite: list[str]) -> Platform:
    if github and buildkite:
        raise InputError(buildkite[0], f"a Buildkite option with {github[0]}: one set is "
                         "either GitHub's or Buildkite's")
    if given == "github" and buildkite:
        raise InputError(buildkite[0], "is for --platform buildkite")
    if given == "buildkite" and github:
        raise InputError(github[0], "is for --platform github")
    return "buildkite" if given == "buildkite" or buildkite else "github"


def _checked(value: str | None, pattern: re.Pattern[str], option: str, what: str) -> str:
    if value is None:
        return PLACEHOLDER
    if not pattern.fullmatch(value) or len(value) > 100:
        raise InputError(option, f"{value!r} is not {what}")
    return value


# Where each URL's credential comes from instead (a URL init writes is committed)
_TOKEN_FROM = {
    "--notify-url": "gitscale takes the notify token from FLUX_RECEIVER_TOKEN or "
                    "ARGOCD_WEBHOOK_SECRET, or the file its _FILE names",
    "--github-url": "gitscale takes the GitHub token from GITHUB_TOKEN or a GitHub App's keys, "
                    "as docs/credentials.md says",
    "--cluster": "Argo CD takes a cluster's credentials from its cluster Secret",
}


def _no_credentials(option: str, url: str) -> None:
    """A URL init writes into the repo must not carry a secret (it would be committed)."""
    if has_credentials(url):
        source = _TOKEN_FROM.get(option, "gitscale takes the git token from "
                                         "GITSCALE_GIT_TOKEN_FILE or GITSCALE_GIT_TOKEN")
        raise InputError(option, f"{redact(url)} has credentials in it; nothing was written "
                         f"({source}, never from a URL)")


def _server(url: str) -> str:
    """``--github-url``: the server's address, ``https://HOST`` (GitHub Enterprise Server, or
    a ``*.ghe.com`` tenant); the organization is ``--github-org``. Not the API's address
    (``api.github.com``, ``api.SUBDOMAIN.ghe.com``): the API is derived from the server's."""
    from gitscale.controller.platform_github import is_api_host

    server = _base_address("--github-url", url, not_url=(
        f"{url!r}: give the server's address, e.g. https://github.example.com"), has_path=(
        f"{url!r}: give the server's address only (https://HOST), and the organization with "
        "--github-org"))
    host = urlsplit(server).hostname or ""
    if is_api_host(host):
        web = "https://github.com" if host.lower() == "api.github.com" else \
            f"https://{host.split('.', 1)[1]}"
        raise InputError("--github-url", f"{url!r} is the REST API's address: give the "
                         f"server's, {web} (gitscale derives the API from it; GitHub "
                         "Enterprise Server: https://HOST, whose API is https://HOST/api/v3)")
    return server


def hinted(text: str, hint: str) -> str:
    """``text`` (YAML written by ``dump``) with ``# hint`` after each line that holds a
    ``CHANGE-ME`` value: the comment ``init`` lists and ``validate`` quotes."""
    lines = text.split("\n")
    return "\n".join(f"{line}  # {hint}" if PLACEHOLDER in line else line for line in lines)
