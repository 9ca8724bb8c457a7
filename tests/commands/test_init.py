"""`gitscale init`: a config repo that validates, plans, and whose GitOps objects match the real
Argo CD and Flux CRDs (fixtures/reference/crds)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gitscale.manifest.crd_schemas import SchemaValidator
from tests.helpers import REFERENCE, git, run

CRDS = REFERENCE / "crds"


def reference_validator(*names: str) -> SchemaValidator:
    return SchemaValidator([yaml.safe_load((CRDS / n).read_text()) for n in names])


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
@pytest.mark.parametrize("run_in", ["cluster", "github-actions"])
def test_init_scaffolds_a_working_repo(tmp_path: Path, capsys, gitops: str,  # type: ignore[no-untyped-def]
                                       run_in: str) -> None:
    """Every option given: nothing left to edit, but from CI the GitOps engine's public URL
    for notify, which init cannot know (its in-cluster address does not resolve there)."""
    root = tmp_path / "config"
    code, out, err = run(capsys, "init", str(root), "--gitops", gitops, "--github-org", "acme",
                         "--repo-url", "https://git.example.com/ci/config.git",
                         "--run-in", run_in)
    assert code == 0, err
    if run_in == "github-actions":
        (edit,) = [line for line in out.splitlines() if "replace CHANGE-ME" in line]
        assert edit.startswith("  gitscale.yaml:") and "'https://CHANGE-ME'" in edit
        assert "public" in edit and "edits left: 1 value init could not know is CHANGE-ME" in out
        code, _, err = run(capsys, "validate", "--repo", str(root))
        assert code == 1 and edit.strip() in err, err
        config = root / "gitscale.yaml"
        config.write_text(config.read_text().replace("https://CHANGE-ME",
                                                     "https://gitops.example.com"))
        git(root, "commit", "-qam", "the engine's public URL")
    else:
        assert "edits left: none" in out
    assert git(root, "status", "--porcelain") == ""
    assert "gitscale init" in git(root, "log", "--format=%s")
    # the kustomization lists files that exist
    kustomization = yaml.safe_load((root / "clusters/prod/kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (root / "clusters/prod" / resource).is_file(), resource
    assert any("crd" in r for r in kustomization["resources"])
    # it validates and plans
    assert run(capsys, "validate", "--repo", str(root))[0] == 0
    code, out, _ = run(capsys, "plan", "--repo", str(root), "--demand", str(root / "demand.yaml"))
    assert code == 2 and "first-write" in out
    # the GitOps objects are valid against the real CRDs
    if gitops == "argocd":
        validator = reference_validator("application-crd.yaml")
        docs = [yaml.safe_load((root / "argocd/application.yaml").read_text())]
    else:
        validator = reference_validator("source.toolkit.fluxcd.io_gitrepositories.yaml",
                                        "kustomize.toolkit.fluxcd.io_kustomizations.yaml")
        docs = list(yaml.safe_load_all((root / "flux/gitscale.yaml").read_text()))
    for doc in docs:
        assert validator.knows(doc), doc["kind"]
        assert validator.check(doc) == [], doc["kind"]
    assert "git.example.com/ci/config.git" in yaml.safe_dump(docs[0])


@pytest.mark.parametrize("run_in", ["cluster", "github-actions", "gitlab"])
def test_init_config_elsewhere_is_passed_on(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                            run_in: str) -> None:
    """--config: the config is written there (no gitscale.yaml), every command init writes or
    prints passes it on, and the repo validates and plans with it."""
    root = tmp_path / "config"
    code, out, err = run(capsys, "init", str(root), "--gitops", "flux", "--github-org", "acme",
                         "--run-in", run_in, "--config", "ci/scale.yaml",
                         "--notify-url", "https://gitops.example.com")
    assert code == 0, err
    assert (root / "ci/scale.yaml").is_file() and not (root / "gitscale.yaml").exists()
    assert "  ci/scale.yaml" in out.splitlines()
    assert "gitscale plan --repo . --config ci/scale.yaml --demand demand.yaml" in out
    commands = {"github-actions": [".github/workflows/gitscale.yml"],
                "gitlab": [".gitlab-ci.yml"],
                "cluster": ["deploy/scaler/cronjob.yaml", "deploy/scaler/deployment-run.yaml",
                            "deploy/scaler/deployment-serve.yaml"]}[run_in]
    for rel in commands:
        text = (root / rel).read_text()
        if run_in == "cluster":
            (pod,) = [d for d in yaml.safe_load_all(text) if d]
            spec = pod["spec"].get("jobTemplate", pod)["spec"]["template"]["spec"]
            args = spec["containers"][0]["args"]
            assert args[args.index("--config") + 1] == "ci/scale.yaml", (rel, args)
        else:
            assert "--config ci/scale.yaml --every 5m" in text, rel
    assert run(capsys, "validate", "--repo", str(root))[0] == 1  # no gitscale.yaml there
    assert run(capsys, "validate", "--repo", str(root), "--config", "ci/scale.yaml")[0] == 0
    code, out, _ = run(capsys, "plan", "--repo", str(root), "--config", "ci/scale.yaml",
                       "--demand", str(root / "demand.yaml"))
    assert code == 2 and "first-write" in out


def test_init_never_overwrites(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "config"
    root.mkdir()
    (root / "gitscale.yaml").write_text("mine\n")
    code, _, err = run(capsys, "init", str(root), "--gitops", "flux")
    assert code == 1 and "already has gitscale.yaml" in err and "nothing was written" in err
    assert (root / "gitscale.yaml").read_text() == "mine\n"
    assert sorted(p.name for p in root.iterdir()) == ["gitscale.yaml"]


def test_init_refuses_credentials_in_url(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(capsys, "init", str(tmp_path / "c"), "--gitops", "argocd",
                         "--repo-url", "https://bot:hunter22@git.example.com/c.git")
    assert code == 1 and "hunter22" not in out + err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(("option", "value", "words"), [
    pytest.param("--branch", "ma in", "not a valid git branch name", id="bad-branch"),
    pytest.param("--path", "prod: {x", "use letters, digits", id="yaml-in-path"),
    pytest.param("--config", "../gitscale.yaml", "relative path inside the repo",
                 id="config-outside"),
    pytest.param("--config", "flux/gitscale.yaml", "a file init writes for another purpose",
                 id="config-clashes"),
    pytest.param("--config", "ci/", "the path of a file", id="config-no-name"),
    pytest.param("--config", "./demand.yaml", "a file init writes for another purpose",
                 id="config-clashes-spelt-otherwise"),
    pytest.param("--config", ".git/config", "inside .git", id="config-in-dot-git"),
])
def test_init_refuses_bad_options_before_writing(tmp_path: Path, capsys, option: str,  # type: ignore[no-untyped-def]
                                                 value: str, words: str) -> None:
    """A bad branch failed at `git init`, after every file was written; a path with YAML in it
    made a gitscale.yaml that does not parse."""
    code, _, err = run(capsys, "init", str(tmp_path / "c"), "--gitops", "flux", option, value)
    assert code == 1 and err.startswith(f"error: {option}") and words in err, err
    assert not (tmp_path / "c").exists()


def test_init_onto_a_file_is_an_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c").write_text("a file\n")
    code, _, err = run(capsys, "init", str(tmp_path / "c"), "--gitops", "flux")
    assert code == 1 and err.startswith("error: ") and "crashed" not in err, err


def test_init_on_an_existing_checkout_commits_only_the_scaffold(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """DIR is the top of an existing checkout: someone's staged work must stay staged, not be
    swept into the `gitscale init` commit."""
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    (tmp_path / "work.txt").write_text("half done\n")
    git(tmp_path, "add", "work.txt")
    code, _, err = run(capsys, "init", str(tmp_path), "--gitops", "flux")
    assert code == 0, err
    committed = git(tmp_path, "show", "--stat", "--format=", "HEAD")
    assert "work.txt" not in committed and "gitscale.yaml" in committed
    assert git(tmp_path, "status", "--porcelain") == "A  work.txt"


@pytest.mark.parametrize("below", ["config", "infra/config", "existing"])
def test_init_in_a_subfolder_of_a_checkout_is_refused(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                      below: str) -> None:
    """Under DIR/ in someone's checkout nothing would read the scaffold (gitscale.yaml, the
    workflow and the GitOps paths are read from the root): refused, nothing written or
    committed, whether DIR exists yet or not."""
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    git(tmp_path, "commit", "--quiet", "--allow-empty", "-m", "first")
    (tmp_path / "existing").mkdir()
    code, out, err = run(capsys, "init", str(tmp_path / below), "--gitops", "argocd")
    assert code == 1 and out == "", out
    assert err == (f"error: {tmp_path / below}: is inside the git checkout {tmp_path}, not its "
                   "top: a config repo's gitscale.yaml, workflow and GitOps paths are read from "
                   f"the root. Run init on {tmp_path} itself, on a directory outside it, or "
                   f"`git init {tmp_path / below}` first for a repo of its own; nothing was "
                   "written\n")
    assert git(tmp_path, "rev-list", "--count", "HEAD") == "1"
    assert not (tmp_path / below / "gitscale.yaml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".git", "existing"]
    # as it says: a repo of its own there is the top of a checkout
    (tmp_path / below).mkdir(parents=True, exist_ok=True)
    git(tmp_path / below, "init", "--quiet", "--initial-branch=main")
    assert run(capsys, "init", str(tmp_path / below), "--gitops", "argocd")[0] == 0
    assert (tmp_path / below / "gitscale.yaml").is_file()


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
def test_init_wires_runnerset_health(tmp_path: Path, capsys, gitops: str) -> None:  # type: ignore[no-untyped-def]
    """Argo CD gets the RunnerSet health check (a Lua script for argocd-cm); Flux waits for
    the objects' health (kstatus), so a set short of its runners shows on the Kustomization."""
    root = tmp_path / "config"
    assert run(capsys, "init", str(root), "--gitops", gitops)[0] == 0
    if gitops == "argocd":
        patch = yaml.safe_load((root / "argocd/argocd-cm-patch.yaml").read_text())
        assert patch["metadata"]["name"] == "argocd-cm"
        assert "obj.status" in patch["data"]["resource.customizations.health.gitscale.dev_RunnerSet"]
    else:
        kustomization = list(yaml.safe_load_all((root / "flux/gitscale.yaml").read_text()))[1]
        assert kustomization["spec"]["wait"] is True and kustomization["spec"]["timeout"] == "5m"


@pytest.mark.parametrize(("options", "scheduler", "chosen_by"), [
    pytest.param(["--repo-url", "https://github.com/acme/ci-config.git"],
                 ".github/workflows/gitscale.yml", "github.com", id="github.com"),
    pytest.param(["--repo-url", "https://git.acme.ghe.com/acme/ci-config.git"],
                 ".github/workflows/gitscale.yml", "git.acme.ghe.com", id="ghe.com"),
    pytest.param(["--repo-url", "https://ghes.acme.example/acme/ci-config.git",
                  "--github-url", "https://ghes.acme.example"],
                 ".github/workflows/gitscale.yml", "ghes.acme.example", id="github-url's host"),
    pytest.param(["--repo-url", "https://gitlab.com/acme/ci-config.git"],
                 ".gitlab-ci.yml", "gitlab.com", id="gitlab.com"),
    pytest.param(["--repo-url", "https://gitlab.acme.example/ci/config.git"],
                 ".gitlab-ci.yml", "gitlab.acme.example", id="self-managed gitlab"),
    pytest.param(["--repo-url", "https://bitbucket.org/acme/ci-config.git"],
                 "deploy/scaler/cronjob.yaml", "bitbucket.org", id="elsewhere: the cluster"),
    pytest.param([], ".github/workflows/gitscale.yml", None, id="no --repo-url"),
    pytest.param(["--repo-url", "https://gitlab.com/acme/ci-config.git", "--run-in", "cluster"],
                 "deploy/scaler/cronjob.yaml", None, id="--run-in wins"),
])
def test_the_scheduler_follows_where_the_config_repo_lives(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, options: list[str], scheduler: str,
        chosen_by: str | None) -> None:
    """Without --run-in, a repo on GitLab gets the GitLab pipeline, not a GitHub workflow that
    would never run; on a host with no CI of its own, the in-cluster scaler."""
    root = tmp_path / "config"
    platform = (["--github-org", "acme"] if "--github-url" in options
                else ["--platform", "buildkite", "--buildkite-org", "acme"])
    code, out, err = run(capsys, "init", str(root), "--gitops", "flux", *platform, *options)
    assert code == 0, err
    written = {p.relative_to(root).as_posix() for p in root.rglob("*")
               if p.is_file() and ".git/" not in p.as_posix() + "/"}
    schedulers = {".github/workflows/gitscale.yml", ".gitlab-ci.yml",
                  "deploy/scaler/cronjob.yaml"}
    assert written & schedulers == {scheduler}
    said = f"(Chosen by where the config repo lives, {chosen_by}; --run-in picks another.)"
    assert (said in out) == (chosen_by is not None)
    assert ("Chosen by where" in out) == (chosen_by is not None)
