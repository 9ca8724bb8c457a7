"""`gitscale validate`: every manifest gitscale manages, against its schema; neither they nor
gitscale.yaml may still hold a ``CHANGE-ME`` that `gitscale init` could not fill in, and no
tracked file may be one of the credential files init's steps write (problems: exit 1).
Warnings (exit 0): a ``CHANGE-ME`` left in any other YAML file of the repo (the GitOps source,
the scaler's pods), a GitHub set whose RunnerSet registers runners with other labels
than its source counts jobs for, a Buildkite set whose agents take another queue's jobs
than its source counts, a set whose source is another CI system than its RunnerSet's
``platform`` (a source changed from github to buildkite), a RunnerSet whose first container, taken as the runner by position (none
named ``runner``), runs no runner image while a later one does, a Buildkite RunnerSet whose agent gets no token
(no ``agentTokenSecret``, no ``BUILDKITE_AGENT_TOKEN``), an object gitscale wrote that no set manages (a set removed
from gitscale.yaml, its manifest left), and a RunnerSet CRD in the repo that is not this gitscale's (an
upgrade done in the wrong order). A RunnerSet its schema accepts but the controller would refuse
(``InvalidSpec``) is a problem too, found by the controller's own checks, and so are two sets
that resolve to one object, which `plan` and `reconcile` refuse."""
from __future__ import annotations

from pathlib import Path
from collections.abc import Iterator, Mapping
from typing import Any

import click

from gitscale import files
from gitscale.commands import EXIT_ERROR, EXIT_OK, RepoOptions
from gitscale.config.load import Config, ConfigLines, RunnerSetConfig, load_config
from gitscale.errors import InputError, ManifestError
from gitscale.plan.manifest_files import read_manifest
from gitscale.manifest.target import (A_DRAINED, A_JOBS, A_LAST_SCALE_UP, A_PATCH_ID,
                                      A_STILL_WAITING, NoSuchObject, Target, read_target,
                                      shared_object)
from gitscale.yamlio.read import Document, compose_together, load_documents
from gitscale.manifest.validate import Validation
from gitscale.repo.git import Git
from gitscale.repo.opening import open_workspace
from gitscale.runnerset_api import API_VERSION, GROUP, KIND
from gitscale.yamlio.placeholders import PLACEHOLDER, placeholder_problems


def run_validate(opts: RepoOptions) -> int:
    problems: list[str] = []
    warnings: list[str] = []
    checked = skipped = 0
    with open_workspace(opts.repo, opts.branch, unborn_ok=True, writes=False) as ws:
        config = load_config(ws.root, opts.config)
        # values `gitscale init` could not fill in: the config is not finished
        problems += placeholder_problems(config.path, config.text)
        listed = ws.git.out("ls-files").splitlines()
        problems += committed_credentials(listed, ws.git)
        validation = Validation(ws.root, lambda: listed)
        by_file: dict[str, list[tuple[RunnerSetConfig, Target]]] = {}
        texts: dict[str, str] = {}
        owners: dict[tuple[str, int], str] = {}
        shared: dict[tuple[str, int], tuple[Target, list[RunnerSetConfig]]] = {}
        # each file read and parsed once, whatever the number of sets in it (a thousand sets
        # in one file of a thousand objects held a thousand parses of it)
        parsed: dict[str, tuple[str, list[Document]]] = {}
        lines = config.lines()  # (a warning's line in gitscale.yaml: its text composed once)
        unreadable: set[str] = set()  # ... and one that cannot be read or parsed, tried once
        for runner_set in config.sets:
            if runner_set.manifest in unreadable:  # (said for the first set of the file)
                continue
            try:  # (one set's unreadable manifest is one problem: the others are checked)
                if runner_set.manifest not in parsed:
                    unreadable.add(runner_set.manifest)
                    text = read_manifest(ws.root, runner_set, config)
                    parsed[runner_set.manifest] = (text, load_documents(
                        text, runner_set.manifest, ManifestError))
                    compose_together(parsed[runner_set.manifest][1])  # (a warning's line)
                    unreadable.discard(runner_set.manifest)
                text, documents = parsed[runner_set.manifest]
                target = read_set_target(config, runner_set, text, documents)
            except InputError as exc:
                if str(exc) not in problems:  # (a file of several sets: said once)
                    problems.append(str(exc))
                continue
            owner = owners.setdefault((target.path, target.index), runner_set.name)
            if owner != runner_set.name:  # (said once per object, below)
                shared.setdefault((target.path, target.index), (target, []))[1].append(
                    runner_set)
                continue
            texts[runner_set.manifest] = text
            by_file.setdefault(runner_set.manifest, []).append((runner_set, target))
            warnings += label_drift(config, lines, runner_set, target)
            warnings += queue_drift(config, lines, runner_set, target)
            warnings += platform_drift(config, lines, runner_set, target)
            warnings += runner_by_position(target)
            warnings += agent_token_missing(target)
        for key, (target, others) in shared.items():
            said = str(shared_object(config, others[0], owners[key], target.kind, target.name))
            if len(others) > 1:  # (each line looked up costs a read of gitscale.yaml)
                names = ", ".join(repr(s.name) for s in others[1:4])
                said += (f" (so do runner sets {names}"
                         f"{f' and {len(others) - 4} more' if len(others) > 4 else ''})")
            problems.append(said)
        for path, sets in by_file.items():
            problems += placeholder_problems(path, texts[path])
            result = validation.check(path, texts[path], [target.obj for _, target in sets])
            problems += result.problems
            # (a spec the schema refuses is said once, by it; the file's others are checked)
            problems += controller_refusals(path, [(s, t) for s, t in sets if not any(
                t.obj is o for o in result.refused)])
            for runner_set, target in sets:
                if any(target.obj is o for o in result.unchecked):
                    skipped += 1
                    click.echo(f"skipped {runner_set.name}: no schema for "
                               f"{target.obj.get('apiVersion')} {target.kind} "
                               f"({_how_to_check(target.obj.get('apiVersion'))})")
                else:
                    checked += 1
        managed = {config.path, *by_file}
        tracked = dict(yaml_texts(ws.root, listed))  # each read once, for the three below
        warnings += unmanaged_placeholders({p: t for p, t in tracked.items() if p not in managed})
        warnings += left_behind(tracked, {(t.path, t.index) for sets in by_file.values()
                                                  for _, t in sets})
        warnings += crd_drift(tracked)
    for problem in problems:
        click.echo(f"error: {problem}", err=True)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    summary = (f"{checked} checked with {validation.how}, {skipped} skipped, "
               f"{plural(len(problems), 'problem')}")
    click.echo(summary + (f", {plural(len(warnings), 'warning')}" if warnings else ""))
    return EXIT_ERROR if problems else EXIT_OK


def read_set_target(config: Config, runner_set: RunnerSetConfig, text: str,
                    documents: list[Document] | None = None) -> Target:
    """The set's object in its manifest's ``text`` (``documents``: parsed already); an
    ``object`` that matches none or several is the config's mistake, said at the set's line."""
    try:
        return read_target(runner_set.manifest, text, runner_set.object, documents)
    except NoSuchObject as exc:
        raise exc.blamed(config, runner_set) from None


def committed_credentials(paths: list[str], repo: Git) -> list[str]:
    """A problem for each tracked file named as a credential file `gitscale init`'s steps have
    the user write beside the scaffold (``init_ignore``): committed, every reader of the repo
    has it — unless git encrypts it as it commits it (git-crypt, transcrypt: a ``filter`` of
    ``.gitattributes``), a credential kept in the repo on purpose."""
    from gitscale.commands.init_ignore import GITIGNORE, encrypted, tracked_credentials

    found = tracked_credentials(paths)
    if found:  # (one git process, only for a repo that tracks such a name)
        hidden = encrypted(repo.run("check-attr", "-z", "filter", "--", *found).stdout)
        found = [path for path in found if path not in hidden]
    return [f"{path}: a credential file is committed (`gitscale init`'s steps write it to create "
            "a Secret from): anyone who can read the repo can read it; revoke and replace the "
            f"credential, then `git rm --cached {path}` and list it in {GITIGNORE} (a file "
            "git-crypt or transcrypt encrypts, by a filter of .gitattributes, is not refused)"
            for path in found]


def controller_refusals(path: str, sets: list[tuple[RunnerSetConfig, Target]]) -> list[str]:
    """What the controller would refuse in a RunnerSet its schema accepts (``Ready`` False,
    ``InvalidSpec``: a platform without its block, a configURL carrying credentials, a
    Buildkite organization without its token Secret…), by the very checks it runs
    (``controller.observe.parse_runnerset`` and the platform's settings), so a review finds
    it before the cluster does."""
    ours = [(s, t) for s, t in sets if t.kind == KIND and t.api_version == API_VERSION]
    if not ours:
        return []
    from gitscale.controller.errors import InvalidRunnerSet
    from gitscale.controller.observe import parse_runnerset
    from gitscale.controller.platforms import kind_of

    found = []
    for runner_set, target in ours:
        try:
            parse_runnerset(target.obj, kind_of)
        except InvalidRunnerSet as exc:
            line = target.documents[target.index].line_of(["spec"])
            found.append(f"{path}:{line}: RunnerSet {target.name} (set {runner_set.name}): "
                         f"the controller would refuse it: {exc}")
    return found


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def yaml_texts(root: Path, paths: list[str]) -> Iterator[tuple[str, str]]:
    """(path, text) of each YAML file of ``paths`` (the files git tracks) that can be read;
    the others are not ours to read (validate reports what gitscale itself reads): a sparse
    checkout's file that is not here, a link (to /dev/zero), one that is not UTF-8."""
    for rel in paths:
        path = root / rel
        if not rel.endswith((".yaml", ".yml")) or path.is_symlink() or not path.is_file():
            continue
        try:
            yield rel, files.read_text(path, rel, InputError)
        except (InputError, OSError, UnicodeDecodeError):
            continue


def unmanaged_placeholders(texts: Mapping[str, str]) -> list[str]:
    """``CHANGE-ME`` in the repo's other YAML files (``texts``: the files git tracks, but the
    config and the managed manifests): gitscale does not read them, but what they configure
    (the GitOps source, the scaler's pods) does not work until each is filled in."""
    return [problem for rel, text in texts.items() if PLACEHOLDER in text
            for problem in placeholder_problems(rel, text)]


# what only gitscale's writes put on an object (a person's `paused` aside)
WRITTEN_BY_GITSCALE = (A_PATCH_ID, A_JOBS, A_LAST_SCALE_UP, A_DRAINED, A_STILL_WAITING)


def left_behind(texts: Mapping[str, str], managed: set[tuple[str, int]]) -> list[str]:
    """A warning for each object of the repo's YAML files that gitscale wrote (a patch ID, its
    bookkeeping annotations) but no set of gitscale.yaml manages (``managed``: (file, document
    index) pairs): a set removed from gitscale.yaml while its manifest stayed, which the GitOps
    engine keeps applying at its last count, unscaled, while plan and reconcile say nothing."""
    found: list[str] = []
    for rel, text in texts.items():
        if "gitscale.dev/" not in text and "patchID" not in text:
            continue
        try:
            documents = load_documents(text, rel)
        except InputError:
            continue  # not ours to read: validate reports what gitscale itself reads
        for index, doc in enumerate(documents):
            obj: Any = doc.data
            if (rel, index) in managed or not isinstance(obj, dict):
                continue
            meta, spec = obj.get("metadata"), obj.get("spec")
            notes = meta.get("annotations") if isinstance(meta, dict) else None
            ours = isinstance(notes, dict) and any(k in notes for k in WRITTEN_BY_GITSCALE) or \
                (obj.get("kind") == KIND and str(obj.get("apiVersion")) == API_VERSION
                 and isinstance(spec, dict) and "patchID" in spec)
            if not ours:
                continue
            name = meta.get("name") if isinstance(meta, dict) else None
            replicas = spec.get("replicas") if isinstance(spec, dict) else None
            found.append(f"{rel}:{doc.line_of(['metadata', 'name'])}: {obj.get('kind')} "
                         f"{name} was written by gitscale but no runner set of gitscale.yaml "
                         f"manages it: it stays at replicas {replicas}, unscaled (a set removed "
                         "from gitscale.yaml: remove its manifest too, or add the set back)")
    return found


def crd_drift(texts: Mapping[str, str]) -> list[str]:
    """A warning for each tracked file holding a RunnerSet CRD other than this gitscale's:
    RunnerSets are checked against the CRD gitscale ships, but the cluster applies the repo's
    (an upgrade done in the wrong order: ``gitscale.manifest.crd_drift``)."""
    from gitscale.manifest.crd_drift import CRD_NAME, drift, where_the_crd_is

    found: list[str] = []
    for rel, text in texts.items():
        if CRD_NAME in text or where_the_crd_is([rel])[0]:
            warning = drift(rel, text)
            if warning:
                found.append(warning)
    return found


def label_drift(config: Config, lines: ConfigLines, runner_set: RunnerSetConfig,
                target: Target) -> list[str]:
    """A warning when a GitHub set's source counts jobs for other labels than its RunnerSet's
    runners register with. A job is counted when each of its labels other than ``self-hosted``
    is among the source's labels (case aside), and GitHub gives it only to a runner that has
    them: the two sets of labels, ``self-hosted`` aside, must be equal."""
    if runner_set.source.kind != "github" or target.kind != "RunnerSet" or \
            not target.api_version.startswith(f"{GROUP}/"):
        return []
    spec: Any = target.obj.get("spec")
    github = spec.get("github") if isinstance(spec, dict) else None
    if not isinstance(github, dict):
        return []
    written = github.get("labels")
    runners = [str(x) for x in written] if isinstance(written, list) and written \
        else [target.name]  # the controller's default: the RunnerSet's name
    counted = [str(x) for x in runner_set.source.settings.labels]
    have, want = _label_set(runners), _label_set(counted)
    if have == want:
        return []
    why = []
    if have - want:
        why.append(f"jobs asking for {', '.join(sorted(have - want))} are never counted")
    if want - have:
        why.append(f"jobs asking for {', '.join(sorted(want - have))} are counted but these "
                   "runners never take them")
    manifest_line = target.documents[target.index].line_of(["spec", "github", "labels"])
    source = "spec.github.labels" if written else f"spec.github.labels (unset: [{target.name}])"
    line = lines.at(runner_set.name, ["source", "github", "labels"])
    return [f"{_at(config.path, line)}: runner set {runner_set.name!r}: source labels "
            f"[{', '.join(counted)}] differ from {source} [{', '.join(runners)}] at "
            f"{_at(target.path, manifest_line)}: {'; '.join(why)} (keep the two equal, "
            "self-hosted aside)"]


def queue_drift(config: Config, lines: ConfigLines, runner_set: RunnerSetConfig,
                target: Target) -> list[str]:
    """A warning when a Buildkite set's source counts the jobs of another queue than its
    RunnerSet's agents take (``spec.buildkite.queue``): the agents scale with jobs they never
    take, and the jobs they would take are not counted. Compared as written, as both are sent
    (the metrics API's ``name``, the agents' ``queue=`` tag)."""
    if runner_set.source.kind != "buildkite" or target.kind != "RunnerSet" or \
            not target.api_version.startswith(f"{GROUP}/"):
        return []
    spec: Any = target.obj.get("spec")
    buildkite = spec.get("buildkite") if isinstance(spec, dict) else None
    agents = buildkite.get("queue") if isinstance(buildkite, dict) else None
    if not isinstance(agents, str) or not agents:
        return []  # (no queue: the schema's problem, said by it)
    counted = runner_set.source.settings.queue
    if agents == counted:
        return []
    manifest_line = target.documents[target.index].line_of(["spec", "buildkite", "queue"])
    line = lines.at(runner_set.name, ["source", "buildkite", "queue"])
    return [f"{_at(config.path, line)}: runner set {runner_set.name!r}: source queue "
            f"{counted!r} differs from spec.buildkite.queue {agents!r} at "
            f"{_at(target.path, manifest_line)}: the source counts the jobs of queue "
            f"{counted!r}, and these agents take only the jobs of queue {agents!r} (keep the "
            "two equal)"]


def platform_drift(config: Config, lines: ConfigLines, runner_set: RunnerSetConfig,
                   target: Target) -> list[str]:
    """A warning when a set's source counts the jobs of another CI system than its RunnerSet's
    runners take (``spec.platform``): a source changed on day two, its RunnerSet left as it
    was. A file source feeds either."""
    kind = runner_set.source.kind
    if kind == "file" or target.kind != "RunnerSet" or \
            not target.api_version.startswith(f"{GROUP}/"):
        return []
    spec: Any = target.obj.get("spec")
    platform = spec.get("platform") if isinstance(spec, dict) else None
    if not isinstance(platform, str) or platform == kind:
        return []  # (no platform: the schema's problem, said by it)
    manifest_line = target.documents[target.index].line_of(["spec", "platform"])
    line = lines.at(runner_set.name, ["source", kind])
    return [f"{_at(config.path, line)}: runner set {runner_set.name!r}: its source counts "
            f"{kind} jobs, and its RunnerSet at {_at(target.path, manifest_line)} runs "
            f"platform {platform}: these runners never take the jobs counted (a {platform} "
            f"source, or platform: {kind})"]


# Images that run a runner (the ones the docs and init use): a container of one of them below
# a first container of none is the runner the author meant, taken by position for a sidecar.
RUNNER_IMAGES = ("buildkite/agent", "actions-runner")


def _containers(target: Target) -> list[dict[str, Any]] | None:
    """The containers of a RunnerSet's pod template (of this gitscale's RunnerSet only); None
    when there are none or the list is malformed (the schema says so, not a warning)."""
    if target.kind != KIND or target.api_version != API_VERSION:
        return None
    spec: Any = target.obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not isinstance(containers, list) or not containers or \
            not all(isinstance(c, dict) for c in containers):
        return None
    return containers


def runner_by_position(target: Target) -> list[str]:
    """A warning when a RunnerSet's template has several containers, none named ``runner``,
    and the first (which the controller then takes as the runner:
    ``controller.observe.runner_container``) runs no runner image while a later one does — a
    sidecar listed above the agent (init names a Buildkite set's container ``agent``) would
    get the platform's environment and judge the pod, and the agent none of it."""
    from gitscale.controller.observe import RUNNER_CONTAINER

    containers = _containers(target)
    if containers is None or len(containers) < 2 or \
            any(c.get("name") == RUNNER_CONTAINER for c in containers):
        return []  # (one container, or one named runner: no guess)

    def runs_a_runner(container: dict[str, Any]) -> bool:
        return any(image in str(container.get("image") or "") for image in RUNNER_IMAGES)

    first, *rest = containers
    meant = [c for c in rest if runs_a_runner(c)]
    if runs_a_runner(first) or not meant:
        return []
    line = target.documents[target.index].line_of(
        ["spec", "template", "spec", "containers", 0, "name"])
    return [f"{_at(target.path, line)}: RunnerSet {target.name}: no container is named "
            f"{RUNNER_CONTAINER!r}, so the controller takes the first, {first.get('name')!r}, "
            "as the runner: it gets the platform's environment and the pod is judged by it, "
            f"not by {meant[0].get('name')!r}; name the runner's container "
            f"{RUNNER_CONTAINER!r} (or list it first)"]


# Where a buildkite/agent container may find its token besides spec.buildkite.agentTokenSecret
TOKEN_ENV = ("BUILDKITE_AGENT_TOKEN", "BUILDKITE_AGENT_TOKEN_PATH")


def agent_token_missing(target: Target) -> list[str]:
    """A warning when a Buildkite RunnerSet names no ``agentTokenSecret`` and its runner
    container (``buildkite/agent``'s image, whose config file holds no token) gets none from
    its own ``env`` or any ``envFrom``: every agent would exit at start, unregistered, and the
    set's pods fail over and over."""
    from gitscale.controller.observe import RUNNER_CONTAINER

    containers = _containers(target)
    spec: Any = target.obj.get("spec")
    settings = spec.get("buildkite") if isinstance(spec, dict) else None
    if containers is None or not isinstance(settings, dict) or \
            settings.get("agentTokenSecret"):
        return []
    # the runner as the controller takes it (``observe.runner_container``)
    runner = next((c for c in containers if c.get("name") == RUNNER_CONTAINER), containers[0])
    name = runner.get("name")
    env: list[Any] = runner["env"] if isinstance(runner.get("env"), list) else []
    if "buildkite/agent" not in str(runner.get("image") or "") or runner.get("envFrom") or \
            any(isinstance(e, dict) and e.get("name") in TOKEN_ENV for e in env):
        return []  # (an image of its own may hold the token; envFrom may give it)
    line = target.documents[target.index].line_of(["spec", "buildkite"])
    return [f"{_at(target.path, line)}: RunnerSet {target.name}: spec.buildkite names no "
            f"agentTokenSecret and container {name!r} gets no BUILDKITE_AGENT_TOKEN: its "
            "agents would exit at start, unregistered; add `agentTokenSecret: "
            "buildkite-agent-token` (the Secret's key `token`: docs/credentials.md)"]


def _label_set(labels: list[str]) -> set[str]:
    return {label.lower() for label in labels} - {"self-hosted"}


def _at(path: str, line: int | None) -> str:
    return f"{path}:{line}" if line is not None else path


def _how_to_check(api_version: object) -> str:
    """A custom resource (its group has a dot: ARC's RunnerDeployment, a Rollout) is checked
    against its CRD committed in the repo, which kubeconform would not know either; a built-in
    kind (apps/v1 Deployment) against kubeconform's Kubernetes schemas."""
    group = str(api_version).rpartition("/")[0]
    if "." in group:
        return "commit its CustomResourceDefinition in the config repo: validate checks each " \
               "object against the CRDs it finds there"
    return "install kubeconform to check built-in kinds"
