"""`gitscale init` leaves nothing silent: what it cannot know is a visible CHANGE-ME, it lists
exactly those lines, `validate` and `reconcile` refuse the repo until they are gone, and every
value it is given lands everywhere it belongs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gitscale.config.load import load_config
from gitscale.controller.github import scope_of
from gitscale.runnerset_api import BUILDKITE_AGENT_IMAGE, GITHUB_RUNNER_IMAGE
from tests.commands.init_variants import ALL, COMPLETE, URL, docs, init, options, written
from tests.helpers import git, run

PLACEHOLDER = "CHANGE-ME"
LISTED = re.compile(r"^  (?P<file>[^\s:]+):(?P<line>\d+): replace CHANGE-ME(?: in '.*')? with "
                    r"(?P<hint>.+)$")


def listed(out: str) -> list[tuple[str, int, str]]:
    """(file, line, what to put there) of each edit init printed."""
    return [(m["file"], int(m["line"]), m["hint"]) for m in map(LISTED.match, out.splitlines())
            if m]


def in_files(root: Path) -> set[tuple[str, int]]:
    """Every line of every written file that says CHANGE-ME, read as plain text."""
    return {(str(path.relative_to(root)), number)
            for path in written(root)
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if PLACEHOLDER in line}


@pytest.mark.parametrize(("gitops", "variant", "complete"), ALL)
def test_the_edits_init_lists_are_exactly_the_change_mes_in_its_files(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, variant: str, complete: bool) -> None:
    root, out = init(tmp_path, capsys, gitops, *options(gitops, variant, complete))
    edits = listed(out)
    assert {(f, n) for f, n, _ in edits} == in_files(root)
    assert len(edits) == len(in_files(root))  # one edit per line, none listed twice
    if complete:
        assert edits == [] and "edits left: none" in out
        return
    assert edits and f"edits left: {len(edits)} values" in out
    for file, number, hint in edits:
        line = (root / file).read_text().splitlines()[number - 1]
        # what to put there is the line's own comment, and the comment is not the placeholder
        assert line.endswith(f"# {hint}") and PLACEHOLDER not in hint, line
    files = {f for f, _, _ in edits}
    assert "clusters/prod/runnersets/linux.yaml" in files  # the org: GitHub's or Buildkite's
    # the GitHub source's org, and the repo URL of Argo CD's notify entry
    assert ("gitscale.yaml" in files) == (variant != "buildkite" or gitops == "argocd")
    # no URL given: the GitOps source and each scaler pod say so, never a made-up URL
    assert ("argocd/application.yaml" if gitops == "argocd" else "flux/gitscale.yaml") in files
    assert {"deploy/scaler/cronjob.yaml", "deploy/scaler/deployment-run.yaml"} <= files


def unfinished_repo(tmp_path: Path, capsys) -> tuple[Path, list[tuple[str, int, str]]]:  # type: ignore[no-untyped-def]
    """A bare Argo CD scaffold with a remote, and the edits of gitscale.yaml and the RunnerSet
    (the files `validate` checks)."""
    root, out = init(tmp_path, capsys, "argocd")
    checked = [e for e in listed(out) if e[0] in ("gitscale.yaml",
                                                  "clusters/prod/runnersets/linux.yaml")]
    # the org twice, and the Argo CD notify entry's repo URL and (from CI) Argo CD's own URL
    assert len(checked) == 4
    return root, checked


def fill(root: Path, file: str, number: int) -> None:
    """Put a real value where line ``number`` says CHANGE-ME: a host in a URL (for notify's
    url, a closed port on loopback: a notification fails at once), else an org."""
    path = root / file
    lines = path.read_text().splitlines(keepends=True)
    value = "git.example.com" if f"://{PLACEHOLDER}/" in lines[number - 1] else \
        "127.0.0.1:1" if f"url: https://{PLACEHOLDER} " in lines[number - 1] else "acme"
    lines[number - 1] = lines[number - 1].replace(PLACEHOLDER, value)
    path.write_text("".join(lines))


@pytest.mark.parametrize("left", [0, 1, 2, 3])
def test_validate_refuses_each_placeholder_naming_its_file_and_line(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, left: int) -> None:
    root, checked = unfinished_repo(tmp_path, capsys)
    code, out, err = run(capsys, "validate", "--repo", str(root))
    assert code == 1 and "4 problems" in out
    # and the files gitscale does not manage: warnings, each at its line
    others = in_files(root) - {(f, n) for f, n, _ in checked}
    assert others and all(f.endswith((".yaml", ".yml")) for f, _ in others)
    warned = {(m[1], int(m[2])) for m in re.finditer(r"^warning: ([^:\s]+):(\d+): replace "
                                                     "CHANGE-ME", err, re.MULTILINE)}
    assert warned == others, err
    assert f", {len(others)} warning{'' if len(others) == 1 else 's'}" in out
    for file, number, hint in checked:
        assert f"{file}:{number}: replace CHANGE-ME" in err and hint in err
    # every other one filled in: exactly the one left is refused, at its line
    for index, (file, number, _) in enumerate(checked):
        if index != left:
            fill(root, file, number)
    git(root, "commit", "-qam", "fill in")
    code, out, err = run(capsys, "validate", "--repo", str(root))
    file, number, hint = checked[left]
    assert code == 1 and "1 problem," in out, out + err
    (line,) = [e for e in err.strip().splitlines() if not e.startswith("warning: ")]
    assert line.startswith(f"error: {file}:{number}: replace CHANGE-ME") and \
        line.endswith(f" with {hint}"), line


def test_validate_ignores_the_word_in_a_comment(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root, _ = init(tmp_path, capsys, "flux", "--github-org", "acme", "--repo-url", URL,
                   "--run-in", "cluster")
    config = root / "gitscale.yaml"
    config.write_text("# CHANGE-ME was here, and is gone\n" + config.read_text())
    git(root, "commit", "-qam", "a comment")
    code, out, err = run(capsys, "validate", "--repo", str(root))
    assert code == 0, err


def test_reconcile_refuses_an_unfinished_config_and_writes_nothing(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    root, checked = unfinished_repo(tmp_path, capsys)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git(root, "remote", "add", "origin", str(remote))
    git(root, "push", "--quiet", "--set-upstream", "origin", "main")
    head = git(root, "rev-parse", "HEAD")
    demand = str(root / "demand.yaml")
    code, out, err = run(capsys, "reconcile", "--repo", str(root), "--demand", demand)
    assert code == 1 and "refusing to commit" in err and "nothing was written" in err, err
    # gitscale.yaml's and (it would be written) the RunnerSet's, each with what belongs there
    for file, number, hint in checked:
        assert f"{file}:{number}: replace CHANGE-ME" in err and hint in err
    assert git(root, "rev-parse", "HEAD") == head and git(root, "status", "--porcelain") == ""
    # `plan` still previews, and says what reconcile will refuse
    code, out, err = run(capsys, "plan", "--repo", str(root), "--demand", demand)
    assert code == 2 and "warning: gitscale.yaml:" in err and "reconcile refuses" in err
    # gitscale.yaml finished, the RunnerSet not: refused at the RunnerSet's line
    for file, number, _ in checked:
        if file == "gitscale.yaml":
            fill(root, file, number)
    git(root, "commit", "-qam", "fill in gitscale.yaml")
    git(root, "push", "--quiet")
    code, out, err = run(capsys, "reconcile", "--repo", str(root), "--demand", demand)
    (runnerset,) = [e for e in checked if e[0] != "gitscale.yaml"]
    assert code == 1 and f"{runnerset[0]}:{runnerset[1]}: replace CHANGE-ME" in err, err
    assert "gitscale.yaml" not in err
    fill(root, runnerset[0], runnerset[1])
    git(root, "commit", "-qam", "fill in the RunnerSet")
    git(root, "push", "--quiet")
    code, out, err = run(capsys, "reconcile", "--repo", str(root), "--demand", demand)
    assert code == 0 and "pushed" in out, err


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
@pytest.mark.parametrize("variant", list(COMPLETE))
def test_init_with_every_option_validates_and_puts_each_value_where_it_belongs(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, variant: str) -> None:
    given = options(gitops, variant, True)
    root, out = init(tmp_path, capsys, gitops, *given)
    assert not in_files(root)
    code, vout, err = run(capsys, "validate", "--repo", str(root))
    assert code == 0 and vout.rstrip().endswith(", 0 problems") and "warning" not in err, err
    value = dict(zip(given[::2], given[1::2]))
    namespace = value.get("--namespace", "ci-runners")
    path = value.get("--path", "clusters/prod")
    config = load_config(root)
    (runner_set,) = config.sets
    (runnerset,) = docs(root / runner_set.manifest)
    assert runner_set.manifest == f"{path}/runnersets/linux.yaml"
    assert runnerset["metadata"]["namespace"] == namespace
    (container,) = runnerset["spec"]["template"]["spec"]["containers"]
    settings = runner_set.source.settings
    if variant == "buildkite":
        assert runner_set.source.kind == "buildkite"
        spec = runnerset["spec"]["buildkite"]
        assert settings.queue == spec["queue"] == value["--buildkite-queue"]
        assert spec["organization"] == value["--buildkite-org"]
        assert container["image"] == BUILDKITE_AGENT_IMAGE
        assert "command" not in container and "args" not in container
    else:
        assert runner_set.source.kind == "github"
        spec = runnerset["spec"]["github"]
        server = value.get("--github-url", "https://github.com")
        assert settings.org == value["--github-org"]
        assert spec["configURL"] == f"{server}/{value['--github-org']}"
        # the source polls the API the controller derives from configURL
        assert settings.api_url == scope_of(spec["configURL"]).api
        if server != "https://github.com":  # the variant's server is GitHub Enterprise Server
            assert settings.api_url == f"{server}/api/v3"
        assert list(settings.labels) == spec["labels"]
        if "--github-app-id" in value:
            assert settings.app is not None and settings.token is None
            assert (settings.app.app_id, settings.app.installation_id) == (
                value["--github-app-id"], value["--github-app-installation-id"])
        assert container["image"] == GITHUB_RUNNER_IMAGE and "command" not in container
    # the runners' namespace: the controller's Namespace, Role and --namespace say the same
    system = root / path / "gitscale-system"
    namespaces = {d["metadata"]["name"] for d in docs(system / "namespace.yaml")}
    assert namespaces == {"gitscale-system", namespace}
    roles = [d for d in docs(system / "rbac.yaml") if d["kind"] == "Role"]
    assert namespace in {r["metadata"]["namespace"] for r in roles}
    (controller,) = docs(system / "deployment.yaml")
    assert f"--namespace={namespace}" in controller["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert f"kubectl -n {namespace} create secret generic" in out
    # the config repo's URL: the GitOps source, notify (Argo CD) and every scaler pod
    if gitops == "argocd":
        (app,) = docs(root / "argocd/application.yaml")
        assert app["spec"]["source"]["repoURL"] == URL
        assert app["spec"]["source"]["path"] == path
        assert app["spec"]["destination"] == {"name": value["--cluster"],
                                              "namespace": namespace}
        (target,) = config.notify
        assert target.repo_url == URL
    else:
        source, kustomization = docs(root / "flux/gitscale.yaml")
        assert source["spec"]["url"] == URL and kustomization["spec"]["path"] == f"./{path}"
    pods = [d for p in (root / "deploy/scaler").glob("*.yaml") for d in docs(p)
            if d["kind"] in ("CronJob", "Deployment")]
    assert pods
    for pod in pods:
        args = yaml.safe_dump(pod)
        assert f"- {URL}\n" in args


@pytest.mark.parametrize(("argv", "option", "words"), [
    pytest.param(["--gitops", "flux", "--cluster", "east"], "--cluster", "Flux applies",
                 id="cluster-with-flux"),
    pytest.param(["--gitops", "argocd", "--github-org", "ac me"], "--github-org",
                 "not a GitHub organization", id="bad-org"),
    pytest.param(["--gitops", "argocd", "--github-org", "acme", "--buildkite-org", "acme"],
                 "--buildkite-org", "either GitHub's or Buildkite's", id="both-platforms"),
    pytest.param(["--gitops", "argocd", "--platform", "github", "--buildkite-queue", "q"],
                 "--buildkite-queue", "--platform buildkite", id="buildkite-option-for-github"),
    pytest.param(["--gitops", "argocd", "--github-url", "https://ghe.example.com/acme"],
                 "--github-url", "with --github-org", id="org-in-github-url"),
    pytest.param(["--gitops", "argocd", "--github-url", "https://tok3n@ghe.example.com"],
                 "--github-url", "has credentials", id="credentials-in-github-url"),
    # the API's address: init wrote apiUrl https://api.github.com/api/v3 and configURL
    # https://api.github.com/ORG (api.api.acme.ghe.com for a tenant), neither of which works
    pytest.param(["--gitops", "argocd", "--github-url", "https://api.github.com"],
                 "--github-url", "is the REST API's address", id="api-github-com"),
    pytest.param(["--gitops", "argocd", "--github-url", "https://api.acme.ghe.com"],
                 "--github-url", "https://acme.ghe.com", id="ghe-com-api"),
    pytest.param(["--gitops", "argocd", "--repo-url", "https://x:s3cret@git.example.com/c.git"],
                 "--repo-url", "has credentials", id="credentials-in-repo-url"),
    pytest.param(["--gitops", "argocd", "--namespace", "gitscale-system"], "--namespace",
                 "controller's own namespace", id="system-namespace"),
    pytest.param(["--gitops", "argocd", "--namespace", "CI"], "--namespace",
                 "not a Kubernetes namespace", id="bad-namespace"),
    pytest.param(["--gitops", "argocd", "--github-app-id", "12a"], "--github-app-id",
                 "numeric id", id="bad-app-id"),
    # without the App's id the printed `kubectl create secret` would carry CHANGE-ME as the id
    pytest.param(["--gitops", "argocd", "--github-app-installation-id", "5"],
                 "--github-app-installation-id", "needs --github-app-id",
                 id="installation-without-app-id"),
])
def test_init_refuses_options_it_cannot_use_and_writes_nothing(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, argv: list[str], option: str, words: str) -> None:
    code, out, err = run(capsys, "init", str(tmp_path / "c"), *argv)
    assert code == 1 and err.startswith(f"error: {option}: ") and words in err, err
    assert "s3cret" not in out + err and "tok3n" not in out + err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(("server", "api"), [
    pytest.param("https://ghes.example.com", "https://ghes.example.com/api/v3", id="ghes"),
    pytest.param("https://ghes.example.com:8443/", "https://ghes.example.com:8443/api/v3",
                 id="ghes-port"),
    pytest.param("https://acme.ghe.com", "https://api.acme.ghe.com", id="ghe.com"),
])
def test_init_on_another_github_writes_its_api_and_its_web_address(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, server: str, api: str) -> None:
    """The source's apiUrl is the server's REST API, the RunnerSet's configURL its web address
    (where runners register), written as GitHub documents them, not only as each other's."""
    root, _ = init(tmp_path, capsys, "flux", "--github-url", server, "--github-org", "acme")
    (runner_set,) = load_config(root).sets
    (runnerset,) = docs(root / runner_set.manifest)
    assert runner_set.source.settings.api_url == api
    assert runnerset["spec"]["github"]["configURL"] == server.rstrip("/") + "/acme"
    text = (root / "gitscale.yaml").read_text()
    assert f"apiUrl: {api}  # the REST API of {server.rstrip('/')}" in text
    assert "api.github.com" not in text


def test_the_pinned_runner_images_are_those_of_the_docs_examples() -> None:
    """One bump: the constants init writes, and the tested examples in docs/, name the same
    releases (never `latest`)."""
    root = Path(__file__).resolve().parents[2]
    examples = "\n".join(p.read_text() for p in (root / "docs/examples").glob("*.yaml"))
    images = set(re.findall(r"image: ((?:ghcr\.io/actions/actions-runner|buildkite/agent):\S+)",
                            examples))
    assert images == {GITHUB_RUNNER_IMAGE, BUILDKITE_AGENT_IMAGE}
    assert not any(i.endswith(":latest") for i in images)
