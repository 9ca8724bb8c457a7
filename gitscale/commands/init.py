"""`gitscale init DIR --gitops argocd|flux`: scaffold a config repo that works on first push.

Writes gitscale.yaml, an example RunnerSet (GitHub's or Buildkite's), the CRD, the controller
(ServiceAccount, RBAC, Deployment), a kustomization tying them together, the Argo CD
Application or the Flux GitRepository + Kustomization that applies it, and the one way to run
gitscale itself that ``--run-in`` chose, and a ``.gitignore`` of the credential files its steps
write there (``init_ignore``; one that is there is added to). Refuses to overwrite anything
else, and prints the next steps in the order that works on a new cluster (push, namespaces,
Secrets, GitOps objects). What it was not told and cannot know is written as ``CHANGE-ME`` (``init_choices``), and it prints each such line with what belongs there, the
same list ``gitscale validate`` refuses the repo with until they are done.
"""
from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path
from typing import Any

import click

from gitscale.commands import EXIT_OK
from gitscale.commands.init_ignore import GITIGNORE, gitignore_text
from gitscale.commands.init_choices import GITHUB, REPO_URL_HINT, RUNNERS_NAMESPACE, \
    SYSTEM_NAMESPACE, Choices, branch_of, choose, hinted
from gitscale.commands.init_notify import notify_block, notify_files, notify_next_steps, \
    scaler_secret_line
from gitscale.commands.init_runners import SET, config_text, controller_secret_commands, \
    demand_text, job_ids_steps, runnerset_text, scaler_secret_command, source_secrets
from gitscale.commands.init_scaler import GIT_SECRET, GIT_TOKEN_FILE
from gitscale.commands.init_schedules import schedule_files, schedule_next_steps
from gitscale.errors import GitscaleError, InputError
from gitscale.files import first_missing
from gitscale.repo.git import Git
from gitscale.controller.crd import crd_yaml
from gitscale.yamlio.placeholders import PLACEHOLDER, Placeholder, find_placeholders
from gitscale.yamlio.write import dump


REPO_SECRET = "gitscale-config-repo"  # Argo CD's / Flux's credential for the config repo
REPO_TOKEN_FILE = "./config-repo-read-token"  # read-only Contents on the config repo


def scaffold(choices: Choices) -> dict[str, str]:
    """path → text of every file ``init`` writes."""
    path = choices.path
    files = {
        "demand.yaml": demand_text(),
        f"{path}/runnersets/{SET}.yaml": runnerset_text(choices),
        f"{path}/gitscale-system/crd.yaml": crd_yaml(),
    }
    controller = resources.files("gitscale.deploy").joinpath("controller")
    names = []
    if controller.is_dir():
        for item in sorted(controller.iterdir(), key=lambda i: i.name):
            if item.name.endswith(".yaml") and item.name != "kustomization.yaml":
                # the runners' namespace: the Namespace, the Role and --namespace name it
                text = item.read_text(encoding="utf-8").replace(RUNNERS_NAMESPACE,
                                                                choices.namespace)
                files[f"{path}/gitscale-system/{item.name}"] = text
                names.append(f"gitscale-system/{item.name}")
    files[f"{path}/kustomization.yaml"] = _dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["gitscale-system/crd.yaml", *names, f"runnersets/{SET}.yaml"],
    })
    repo_url, branch = choices.repo_url, choices.branch
    if choices.gitops == "argocd":
        files["argocd/application.yaml"] = hinted(_dump(argocd_application(choices)),
                                                  REPO_URL_HINT)
        # RunnerSet health for Argo CD (a Lua check on the status the controller writes).
        files["argocd/argocd-cm-patch.yaml"] = resources.files("gitscale.deploy").joinpath(
            "argocd", "argocd-cm-patch.yaml").read_text(encoding="utf-8")
    else:
        source, kustomization = flux_objects(repo_url, branch, path,
                                             private=not choices.public_repo)
        files["flux/gitscale.yaml"] = hinted(_dump(source), REPO_URL_HINT) + "---\n" \
            + _dump(kustomization)
    files.update(notify_files(choices.gitops))
    files.update(schedule_files(choices))
    if choices.config in files:
        raise InputError("--config", f"{choices.config!r} is a file init writes for another "
                         "purpose; pick another path; nothing was written")
    config = config_text(choices, _api_url(choices)) + notify_block(choices)
    return {choices.config: config, **files}


def _api_url(choices: Choices) -> str | None:
    """The GitHub source's apiUrl: none on github.com (the default), else the API the
    controller derives from the RunnerSet's configURL (one rule for both)."""
    if choices.platform != "github" or choices.github_server == GITHUB:
        return None
    from gitscale.controller.github import scope_of  # httpx: only for a GitHub server URL

    return scope_of(choices.config_url).api


def argocd_application(choices: Choices) -> dict[str, Any]:
    cluster = choices.cluster
    destination = {"server": cluster} if "://" in cluster else {"name": cluster}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "gitscale", "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {"repoURL": choices.repo_url, "targetRevision": choices.branch,
                       "path": choices.path},
            "destination": {**destination, "namespace": choices.namespace},
            # Prune with background propagation: Argo CD's default, foreground, has the
            # garbage collector delete a pruned RunnerSet's runner pods at once, busy ones too,
            # before the controller's finalizer can drain them (README, "Removing a runner
            # set"). Flux's kustomize-controller prunes in the background already.
            "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                           "syncOptions": ["CreateNamespace=true", "ServerSideApply=true",
                                           "PrunePropagationPolicy=background"]},
        },
    }


def flux_objects(repo_url: str, branch: str, path: str, *, private: bool = True,
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    spec: dict[str, Any] = {"interval": "1m", "url": repo_url, "ref": {"branch": branch}}
    if private:  # HTTPS basic auth: keys username and password (repo_credential_commands)
        spec["secretRef"] = {"name": REPO_SECRET}
    source = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": "gitscale", "namespace": "flux-system"},
        "spec": spec,
    }
    kustomization = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "gitscale", "namespace": "flux-system"},
        # wait: Flux checks every object's health (kstatus: a RunnerSet short of its runners
        # is in progress, a stalled one failed) and says so on the Kustomization.
        "spec": {"interval": "1m", "path": f"./{path}", "prune": True, "wait": True,
                 "timeout": "5m", "sourceRef": {"kind": "GitRepository", "name": "gitscale"}},
    }
    return source, kustomization


def _dump(obj: dict[str, Any]) -> str:
    return dump(obj, width=100)


def init_command(*, directory: str | None, repo: str | None, **options: Any) -> int:
    """`gitscale init` as its options come: DIRECTORY and --repo name the same folder (give
    one; neither: .)."""
    if directory and repo and directory != repo:
        raise InputError("--repo", f"{repo!r} and DIRECTORY {directory!r} differ: give one")
    return run_init(directory or repo or ".", **options)


def run_init(directory: str, **options: Any) -> int:
    """``options``: the command's (``init_choices.choose``)."""
    root = Path(directory).expanduser()
    choices = choose(**{**options, "branch": branch_of(root, options.get("branch"))})
    files = scaffold(choices)
    clashes = sorted(rel for rel in files if (root / rel).exists())
    ignore = root / GITIGNORE
    if ignore.exists() and (ignore.is_symlink() or not ignore.is_file()):
        clashes.append(f"{GITIGNORE} (not a file)")
    if clashes:
        raise InputError(str(root), "already has " + ", ".join(clashes[:5])
                         + (" …" if len(clashes) > 5 else "") + "; nothing was written")
    # the credential files the steps below have the user write here, never to be committed
    ignored_before = _read_gitignore(ignore)
    ignore_text = gitignore_text(ignored_before)
    if ignore_text is not None:
        files[GITIGNORE] = ignore_text
    created = first_missing(root)  # the folder init makes, if DIR is new
    written: list[Path] = []
    repo = Git(root)
    new_repo = False
    add = list(files)
    try:
        for rel, text in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if target != ignore or ignored_before is None:
                written.append(target)  # (a .gitignore that was there gets its text back)
            target.write_text(text, encoding="utf-8")
        new_repo = repo.run("rev-parse", "--show-toplevel", check=False).code != 0
        if new_repo:
            repo.run("init", "--quiet", f"--initial-branch={choices.branch}")
        elif GITIGNORE in files and repo.run("ls-files", "--error-unmatch", "--", GITIGNORE,
                                             check=False).code == 0:
            add.remove(GITIGNORE)  # tracked: committed as it is now, its index left alone
        repo.run("add", "--", *add)
        # Only the scaffold: DIR may sit in a repo whose index holds someone's staged work.
        repo.run("commit", "--quiet", "-m", f"gitscale init ({choices.gitops})", "--", *files)
    except (OSError, GitscaleError) as exc:  # DIR is a file, not writable, a full disk
        if ignored_before is not None and created is None:
            _restore(ignore, ignored_before)
        _undo(root, created, written, add if not new_repo else None)
        if isinstance(exc, OSError):
            raise InputError(str(exc.filename or root), "cannot be written: "
                             f"{exc.strerror or type(exc).__name__}; nothing was kept") from None
        raise
    click.echo(f"wrote {len(files)} files to {root} and committed them:")
    for rel in files:
        click.echo(f"  {rel}" + ("   (the credential files the steps below write: never to be "
                                 "committed)" if rel == GITIGNORE else ""))
    click.echo("\n" + edits_text(edits_left(files)))
    has_origin = repo.run("remote", "get-url", "origin", check=False).code == 0
    click.echo("\n" + next_steps(choices, root, has_origin=has_origin and not new_repo))
    return EXIT_OK


def _read_gitignore(path: Path) -> str | None:
    """DIR's ``.gitignore`` as it is (None: there is none), to add to, never to replace."""
    if not path.exists():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"cannot be read ({exc}); init adds the credential files "
                         "of its steps to it; nothing was written") from None


def _restore(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError:
        pass  # (the error that brought us here is the one to report)


def _undo(root: Path, created: Path | None, written: list[Path],
          staged: list[str] | None) -> None:
    """Take back what a failed init wrote: the folder it created, else each file it wrote (no
    file was there before: init refuses to write over one), the folders left empty, a .git it
    made, and (``staged``, in a repo that was there) its files from the index."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
        return
    for path in written:
        path.unlink(missing_ok=True)
        for folder in path.parents:
            if folder == root or not folder.is_relative_to(root):
                break
            try:
                folder.rmdir()  # only if empty
            except OSError:
                break
    if staged is None:
        shutil.rmtree(root / ".git", ignore_errors=True)
    elif staged:
        Git(root).run("rm", "--cached", "--quiet", "--ignore-unmatch", "--", *staged,
                      check=False)


def edits_left(files: dict[str, str]) -> list[tuple[str, Placeholder]]:
    """Every ``CHANGE-ME`` value in the YAML files written, by file and line."""
    return [(rel, found) for rel, text in files.items() if rel.endswith((".yaml", ".yml"))
            for found in find_placeholders(text)]


def edits_text(edits: list[tuple[str, Placeholder]]) -> str:
    if not edits:
        return f"edits left: none (no {PLACEHOLDER} anywhere)."
    counted = "1 value" if len(edits) == 1 else f"{len(edits)} values"
    lines = [f"edits left: {counted} init could not know "
             f"{'is' if len(edits) == 1 else 'are'} {PLACEHOLDER}; "
             "`gitscale validate` and `reconcile` refuse the repo while gitscale.yaml or the "
             "RunnerSet holds one:"]
    lines += [f"  {found.describe(rel)}" for rel, found in edits]
    return "\n".join(lines)


def next_steps(choices: Choices, root: Path, *, has_origin: bool = False) -> str:
    """What to do after init, in the order that works: push, the namespaces, the Secrets in
    them, the GitOps objects, then the sync webhook and the scheduler."""
    url = _url_or_stand_in(choices)
    push = (f"git push -u origin {choices.branch}" if has_origin
            else f"git remote add origin {url} && git push -u origin {choices.branch}")
    if choices.gitops == "argocd":
        apply = ["kubectl apply -f argocd/application.yaml",
                 "# RunnerSet health in Argo CD (a Lua check on the status the controller "
                 "writes):",
                 "kubectl -n argocd patch configmap argocd-cm --type merge "
                 "--patch-file argocd/argocd-cm-patch.yaml"]
    else:
        apply = ["kubectl apply -f flux/gitscale.yaml"]
    config = choices.config_flag
    return "\n".join([
        f"next, from {root} (cd there: every path below is relative to it):",
        f"1. push it{'' if choices.repo_url_given else ' (your config repo: its https URL)'}:",
        push,
        "",
        "2. " + secrets_text(choices),
        "",
        "3. apply the GitOps objects (Argo CD / Flux creates the rest at its first sync):",
        *apply,
        "",
        f"4. {notify_next_steps(choices)}",
        "",
        f"5. {schedule_next_steps(choices)}",
        "",
        f"try `gitscale plan --repo .{config} --demand demand.yaml` and "
        f"`gitscale validate --repo .{config}`.",
    ])


def _url_or_stand_in(choices: Choices) -> str:
    """The config repo's URL for a printed command; a stand-in no one mistakes for a repo."""
    return choices.repo_url if choices.repo_url_given else "https://HOST/OWNER/REPO.git"


def namespace_command(choices: Choices) -> str:
    """The namespaces init wrote (the runners' and the controller's), created before the
    Secrets in them: Argo CD / Flux would create them only at their first sync."""
    return f"kubectl apply -f {choices.path}/gitscale-system/namespace.yaml"


def repo_credential_commands(choices: Choices) -> list[str]:
    """The Secret Argo CD / Flux read a private config repo with: HTTPS, a read-only token
    from a file (docs/credentials.md), the user name a fixed word."""
    if choices.public_repo:
        return []
    password = f"--from-file=password={REPO_TOKEN_FILE}"
    if choices.gitops == "flux":
        return ["# Flux reads the config repo with it (the GitRepository's secretRef)",
                f"kubectl -n flux-system create secret generic {REPO_SECRET} \\\n"
                f"  --from-literal=username=git {password}"]
    return ["# Argo CD reads the config repo with it (a repository Secret: the label)",
            f"kubectl -n argocd create secret generic {REPO_SECRET} \\\n"
            f"  --from-literal=type=git --from-literal=url={_url_or_stand_in(choices)} \\\n"
            f"  --from-literal=username=git {password}",
            f"kubectl -n argocd label secret {REPO_SECRET} "
            "argocd.argoproj.io/secret-type=repository"]


def secrets_text(choices: Choices) -> str:
    """The namespaces, then the Secrets to create, each value read from a file (never typed
    into a command)."""
    commands = [namespace_command(choices),
                "# each token file below holds one token and nothing else, written without a "
                "newline (printf\n# '%s' \"$TOKEN\" > the file; a GitHub App's key: the .pem "
                "as downloaded); .gitignore keeps\n# them out of the repo: delete them once the "
                "Secrets exist",
                *controller_secret_commands(choices),
                *repo_credential_commands(choices)]
    if choices.run_in == "cluster":
        commands += [scaler_secret_command(choices), *job_ids_steps(choices),
                     f"kubectl -n {SYSTEM_NAMESPACE} create secret generic {GIT_SECRET} "
                     f"--from-file=token={GIT_TOKEN_FILE}"]
    if choices.run_in == "github-actions":
        # (the workflow pushes with its checkout's own token: no git token to set)
        commands += ["# the workflow's repository secrets (stdin: never an argument)",
                     *(scaler_secret_line(choices.run_in, s.ci_secret, s.file)
                       for s in source_secrets(choices)), *job_ids_steps(choices)]
    if choices.run_in == "gitlab":
        commands += ["# the pipeline's CI/CD variables (Settings > CI/CD > Variables; stdin: "
                     "never an argument):",
                     "# a project access token with write_repository, to push",
                     scaler_secret_line(choices.run_in, "GITSCALE_GIT_TOKEN", GIT_TOKEN_FILE)]
        for secret in source_secrets(choices):
            line = scaler_secret_line(choices.run_in, secret.env, secret.file,
                                      masked=secret.maskable)
            commands.append(line + ("" if secret.maskable else
                                    "   # several lines: GitLab cannot mask it"))
        commands += job_ids_steps(choices)
    return ("the namespaces, then the secrets in them (docs/credentials.md of gitscale says "
            "what each token may do):\n" + "\n".join(commands))
