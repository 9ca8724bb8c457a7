"""`gitscale init`'s next steps, run in order by a new platform engineer: the namespaces before
the Secrets in them, the GitOps engine's credential for a private config repo, the branch the
repo really has, an https:// repo URL, one scheduler, secrets that never reach an argument."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from gitscale.config.load import load_config
from gitscale.plan.pass_watch import PassWatch
from gitscale.repo.deadline import seconds_of
from gitscale.metrics import LoopMetrics, start_listener
from tests.commands.test_init import reference_validator
from tests.helpers import git, run
from tests.ship.shipfiles import ROOT

URL = "https://git.example.com/ci/config.git"


def init(tmp_path: Path, capsys, gitops: str, *extra: str,  # type: ignore[no-untyped-def]
         root: Path | None = None) -> tuple[Path, str]:
    root = root or tmp_path / "config"
    code, out, err = run(capsys, "init", str(root), "--gitops", gitops, "--github-org", "acme",
                         *extra)
    assert code == 0, err
    return root, out


def lines(out: str) -> list[str]:
    return out.splitlines()


def docs(path: Path) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
@pytest.mark.parametrize("run_in", ["github-actions", "cluster"])
def test_the_namespaces_come_before_every_secret_in_them(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, run_in: str) -> None:
    root, out = init(tmp_path, capsys, gitops, "--repo-url", URL, "--namespace", "runners",
                     "--run-in", run_in)
    printed = lines(out)
    create = "kubectl apply -f clusters/prod/gitscale-system/namespace.yaml"
    first = printed.index(create)
    # the file it applies holds both namespaces the Secrets go into
    assert {d["metadata"]["name"] for d in  # type: ignore[index]
            docs(root / "clusters/prod/gitscale-system/namespace.yaml")} == {
        "gitscale-system", "runners"}
    secrets = [i for i, line in enumerate(printed)
               if re.match(r"kubectl -n (runners|gitscale-system) create secret", line)]
    assert secrets and min(secrets) > first
    assert any(printed[i].startswith("kubectl -n gitscale-system") for i in secrets) == (
        run_in == "cluster")
    if run_in == "cluster":  # deploy/scaler/README.md: the same order
        readme = (root / "deploy/scaler/README.md").read_text()
        assert readme.index(create) < readme.index("create secret generic")


def test_flux_reads_a_private_repo_with_a_secret_init_says_how_to_create(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    root, out = init(tmp_path, capsys, "flux", "--repo-url", URL)
    source = next(d for d in docs(root / "flux/gitscale.yaml") if d["kind"] == "GitRepository")
    validator = reference_validator("source.toolkit.fluxcd.io_gitrepositories.yaml")
    assert validator.check(source) == []
    assert source["spec"]["secretRef"] == {"name": "gitscale-config-repo"}  # type: ignore[index]
    assert ("kubectl -n flux-system create secret generic gitscale-config-repo \\\n"
            "  --from-literal=username=git --from-file=password=./config-repo-read-token"
            ) in out
    assert "gitscale-config-repo" in (ROOT / "docs/credentials.md").read_text()


def test_argocd_gets_a_repository_secret_with_the_applications_url(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    root, out = init(tmp_path, capsys, "argocd", "--repo-url", URL)
    (app,) = docs(root / "argocd/application.yaml")
    assert app["spec"]["source"]["repoURL"] == URL  # type: ignore[index]
    assert ("kubectl -n argocd create secret generic gitscale-config-repo \\\n"
            f"  --from-literal=type=git --from-literal=url={URL} \\\n"
            "  --from-literal=username=git --from-file=password=./config-repo-read-token"
            ) in out
    assert ("kubectl -n argocd label secret gitscale-config-repo "
            "argocd.argoproj.io/secret-type=repository") in lines(out)


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
def test_public_repo_leaves_the_repo_credential_out(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                    gitops: str) -> None:
    root, out = init(tmp_path, capsys, gitops, "--repo-url", URL, "--public-repo")
    assert "gitscale-config-repo" not in out
    assert not any("gitscale-config-repo" in p.read_text() for p in root.rglob("*.yaml"))


@pytest.mark.parametrize("url", [
    pytest.param("htps://github.com/acme/x.git", id="typo-scheme"),
    pytest.param("github.com/acme/x", id="no-scheme"),
    pytest.param("git@github.com:acme/x.git", id="scp-ssh"),
    pytest.param("ssh://git@github.com/acme/x.git", id="ssh"),
    pytest.param("file:///srv/git/x.git", id="file"),
    pytest.param("/srv/git/x.git", id="local-path"),
    pytest.param("https:/github.com/acme/x", id="no-host"),
])
def test_a_repo_url_that_is_not_http_is_refused_before_writing(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, url: str) -> None:
    code, out, err = run(capsys, "init", str(tmp_path / "c"), "--gitops", "flux",
                         "--repo-url", url)
    assert code == 1 and err.startswith("error: --repo-url: "), err
    assert "https://" in err and "Flux needs the scheme" in err and "nothing was written" in err
    assert "Traceback" not in err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("url", ["https://github.com/acme/x.git", "http://git.internal/x.git"])
def test_http_and_https_urls_are_taken(tmp_path: Path, capsys, url: str) -> None:  # type: ignore[no-untyped-def]
    root, out = init(tmp_path, capsys, "flux", "--repo-url", url)
    assert f"git remote add origin {url} && git push -u origin main" in lines(out)


def test_init_in_a_repo_on_master_follows_master(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    git(tmp_path, "init", "--quiet", "--initial-branch=master")
    root, out = init(tmp_path, capsys, "argocd", "--repo-url", URL, root=tmp_path)
    assert git(tmp_path, "rev-parse", "--abbrev-ref", "HEAD") == "master"
    assert "gitscale init" in git(tmp_path, "log", "-1", "--format=%s", "master")
    (app,) = docs(root / "argocd/application.yaml")
    assert app["spec"]["source"]["targetRevision"] == "master"  # type: ignore[index]
    assert f"git remote add origin {URL} && git push -u origin master" in lines(out)
    cluster = tmp_path / "other"
    cluster.mkdir()
    git(cluster, "init", "--quiet", "--initial-branch=trunk")
    root, _ = init(tmp_path, capsys, "flux", "--run-in", "cluster", root=cluster)
    (cron,) = docs(root / "deploy/scaler/cronjob.yaml")
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]  # type: ignore[index]
    assert args[args.index("--branch") + 1] == "trunk"
    source = next(d for d in docs(root / "flux/gitscale.yaml") if d["kind"] == "GitRepository")
    assert source["spec"]["ref"] == {"branch": "trunk"}  # type: ignore[index]


def test_a_branch_other_than_the_checked_out_one_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    git(tmp_path, "init", "--quiet", "--initial-branch=master")
    code, _, err = run(capsys, "init", str(tmp_path), "--gitops", "flux", "--branch", "main")
    assert code == 1 and err.startswith("error: --branch: 'main'"), err
    assert "'master' checked out" in err and "nothing was written" in err
    assert not (tmp_path / "gitscale.yaml").exists()
    # repeating the checked-out branch is fine
    assert run(capsys, "init", str(tmp_path), "--gitops", "flux", "--branch", "master")[0] == 0


def test_a_detached_head_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    git(tmp_path, "commit", "--quiet", "--allow-empty", "-m", "first")
    git(tmp_path, "checkout", "--quiet", "--detach")
    code, _, err = run(capsys, "init", str(tmp_path), "--gitops", "flux")
    assert code == 1 and "detached HEAD" in err and "nothing was written" in err
    assert not (tmp_path / "config").exists()


def test_a_new_repo_uses_branch_or_main(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root, _ = init(tmp_path, capsys, "flux", "--branch", "prod")
    assert git(root, "rev-parse", "--abbrev-ref", "HEAD") == "prod"


SCALER_GIVES = {"github-actions": "gh secret set ", "gitlab": "glab variable set ",
                "cluster": "kubectl -n gitscale-system create secret generic "}
SCHEDULERS = {"github-actions": ".github/workflows/gitscale.yml", "gitlab": ".gitlab-ci.yml",
              "cluster": "deploy/scaler/cronjob.yaml"}


@pytest.mark.parametrize("run_in", list(SCHEDULERS))
def test_init_writes_one_scheduler_and_says_which_runs(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, run_in: str) -> None:
    root, out = init(tmp_path, capsys, "flux", "--repo-url", URL, "--run-in", run_in)
    for other, path in SCHEDULERS.items():
        assert (root / path).exists() == (other == run_in), path
    assert not (root / "deploy").exists() or run_in == "cluster"
    step = next(line for line in lines(out) if line.startswith("5. gitscale runs "))
    assert SCHEDULERS[run_in].split("/")[0] in step or "kubectl apply -k deploy/scaler/" in step
    others = "|".join(r for r in SCHEDULERS if r != run_in)
    assert f"--run-in {others}`" in step and "never two at once" in step
    if run_in == "cluster":
        readme = (root / "deploy/scaler/README.md").read_text()
        assert ".github/workflows/gitscale.yml" in readme and "one place only" in readme


def test_the_default_scheduler_is_the_github_workflow(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root, _ = init(tmp_path, capsys, "argocd")
    assert (root / ".github/workflows/gitscale.yml").is_file()
    assert not (root / "deploy").exists() and not (root / ".gitlab-ci.yml").exists()


def fake_kubectl(bin_dir: Path, log: Path) -> None:
    """kubectl that records its arguments, and what it reads from --patch-file."""
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(f"""#!/bin/sh
printf '%s\\n' "$*" >> {log}
prev=""
for a in "$@"; do
  if [ "$prev" = "--patch-file" ]; then cat "$a" > {log}.patch; fi
  prev="$a"
done
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_argocd_webhook_secret_goes_through_a_file_never_an_argument(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    root, out = init(tmp_path, capsys, "argocd", "--repo-url", URL, "--run-in", "cluster")
    printed = lines(out)
    start = printed.index("4. sync in seconds: a webhook secret shared with Argo CD:") + 1
    snippet = "\n".join(printed[start:printed.index("", start)])
    # (a value assigned, never a file named: --from-file=ARGOCD_WEBHOOK_SECRET=./file is fine)
    assert " -p " not in snippet and not re.search(r"SECRET=(?!\./)", snippet)
    # the file the scaler's README reads the same value from
    assert "--from-file=ARGOCD_WEBHOOK_SECRET=./argocd-webhook-secret" in (
        root / "deploy/scaler/README.md").read_text()
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "kubectl.log"
    fake_kubectl(tmp_path / "bin", log)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-c", snippet], cwd=work, env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    secret = (work / "argocd-webhook-secret").read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", secret)  # no newline: the same bytes for both
    assert secret not in log.read_text()  # kubectl's arguments
    patch = json.loads((tmp_path / "kubectl.log.patch").read_text())
    assert patch == {"stringData": {"webhook.github.secret": secret}}


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
@pytest.mark.parametrize("run_in", list(SCHEDULERS))
def test_no_printed_line_holds_a_secret_value(tmp_path: Path, capsys, gitops: str,  # type: ignore[no-untyped-def]
                                              run_in: str) -> None:
    _, out = init(tmp_path, capsys, gitops, "--repo-url", URL, "--run-in", run_in)
    # a command continued over lines (a `\` at the end) is read as one: the repo credential's
    # --from-file=password= is on its second line
    commands = re.sub(r"\\\n\s*", " ", out).splitlines()
    storing = [c for c in commands if c.startswith(("kubectl", "gh ", "glab "))
               and re.search(r"\bsecret\b|\bvariable set\b", c)]
    assert any("create secret generic gitscale-config-repo " in c for c in storing), out
    assert any(c.startswith(SCALER_GIVES[run_in]) for c in storing), out  # the scaler's token
    for command in storing:
        # values come from files (--from-file, <, --patch-file); literals are not secret
        literals = re.findall(r"--from-literal=(\w+)=", command)
        assert set(literals) <= {"type", "url", "username"}, command
        assert not re.search(r" (-p|-b|--body|--value)[ =]|--from-env", command), command
        if command.startswith(("gh ", "glab ")):
            assert re.search(r" < \./[\w.-]+$", command), command  # the value from stdin


def test_next_steps_name_the_argocd_health_patch_and_the_remote(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    root, out = init(tmp_path, capsys, "argocd", "--repo-url", URL)
    printed = lines(out)
    patch = ("kubectl -n argocd patch configmap argocd-cm --type merge "
             "--patch-file argocd/argocd-cm-patch.yaml")
    assert printed.index("kubectl apply -f argocd/application.yaml") < printed.index(patch)
    assert (root / "argocd/argocd-cm-patch.yaml").is_file()
    push = f"git remote add origin {URL} && git push -u origin main"
    assert printed.index(push) < printed.index("kubectl apply -f argocd/application.yaml")
    # the URL not given: a stand-in, never a made-up repo
    _, out = init(tmp_path, capsys, "flux", root=tmp_path / "bare")
    assert ("git remote add origin https://HOST/OWNER/REPO.git && git push -u origin main"
            in lines(out))
    _, out = init(tmp_path, capsys, "argocd", root=tmp_path / "bare-argocd")
    assert "--from-literal=url=https://HOST/OWNER/REPO.git" in out and "CHANGE-ME" not in \
        out.split("next, from")[1]


def test_a_checkout_with_origin_is_only_pushed(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    git(tmp_path, "init", "--quiet", "--initial-branch=main")
    git(tmp_path, "remote", "add", "origin", URL)
    _, out = init(tmp_path, capsys, "flux", "--repo-url", URL, root=tmp_path)
    assert "git push -u origin main" in lines(out)
    assert "git remote add" not in out


def test_runs_deployment_probes_the_health_its_metrics_port_answers(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """run's --metrics-listen answers /healthz (a pass stuck past its bound: 503): its
    Deployment's liveness probe asks that path on that named port; serve probes its own."""
    root, _ = init(tmp_path, capsys, "flux", "--run-in", "cluster")
    text = (root / "deploy/scaler/deployment-run.yaml").read_text()
    assert "Liveness: /healthz on the metrics port fails once a pass has run for 15 minutes" \
        in text
    (deployment,) = docs(root / "deploy/scaler/deployment-run.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    probe = container["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert {"name": "metrics", "containerPort": 9090} in container["ports"]
    assert "--metrics-listen" in container["args"]
    assert "readinessProbe" not in container  # (no Service sends it traffic)
    # SIGTERM: the pass in flight ends within --shutdown-timeout (its git commands that talk
    # to the remote cut then), inside the grace period, not killed mid-push by Kubernetes
    (serve,) = docs(root / "deploy/scaler/deployment-serve.yaml")
    assert serve["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"][  # type: ignore[index]
        "port"] == "http"
    for pod in (deployment["spec"]["template"]["spec"], serve["spec"]["template"]["spec"]):  # type: ignore[index]
        args = pod["containers"][0]["args"]
        stop = seconds_of("--shutdown-timeout", args[args.index("--shutdown-timeout") + 1])
        assert stop + 5 <= pod["terminationGracePeriodSeconds"], pod
    server = start_listener("127.0.0.1:0", LoopMetrics().registry,
                            health=PassWatch(stall=900.0).health)
    try:
        host, port = server.sock.getsockname()[:2]
        assert httpx.get(f"http://{host}:{port}/healthz").json() == {"status": "ok",
                                                                     "passes": 0}
        assert httpx.get(f"http://{host}:{port}/metrics").status_code == 200
    finally:
        server.stop()


# Files a user brings (tokens made on GitHub, GitLab, Buildkite): every other file a printed
# command reads must be made by an earlier printed command.
USER_FILES = ["config-repo-read-token", "github-source-token", "github-controller-token",
              "github-app.private-key.pem", "git-push-token"]
VARIANTS = {
    "github": ["--github-org", "acme"],
    "github-app": ["--github-org", "acme", "--github-app-id", "123"],
    "buildkite": ["--platform", "buildkite", "--buildkite-org", "acme-ci"],
}


def scaffold(tmp_path: Path, capsys, gitops: str, *extra: str) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """``init`` with exactly ``extra`` (the variants say the organization themselves)."""
    root = tmp_path / "config"
    code, out, err = run(capsys, "init", str(root), "--gitops", gitops, *extra)
    assert code == 0, err
    return root, out
FAKE_TOOL = """#!/bin/sh
# {name} as the printed steps use it: every file it is told to read must exist.
printf '%s' "{name}" >> "$CALLS"; printf ' %s' "$@" >> "$CALLS"; echo >> "$CALLS"
prev=""
for a in "$@"; do
  case "$a" in
    --from-file=*) f="${{a#--from-file=}}"; f="${{f#*=}}"; [ -s "$f" ] || {{ echo "{name}: no $f" >&2; exit 3; }} ;;
  esac
  if [ "$prev" = "-f" ] || [ "$prev" = "--patch-file" ]; then
    [ -e "$a" ] || {{ echo "{name}: no $a" >&2; exit 3; }}
    [ "$a" = /dev/stdin ] && cat > /dev/null
  fi
  prev="$a"
done
if [ "{name}" != kubectl ]; then
  [ -n "$(cat)" ] || {{ echo "{name}: nothing on stdin" >&2; exit 4; }}
fi
exit 0
"""


def printed_steps(out: str, first: int, last: int) -> str:
    """Steps ``first``..``last`` of init's output as one shell script (the numbered headings
    dropped): what a user pastes, in order."""
    text = out.split("\nnext, from ", 1)[1]
    chunks = re.split(r"\n\n(?=\d\. )", text)
    keep = [c for c in chunks if re.match(r"\d\. ", c) and first <= int(c[0]) <= last]
    return "\n".join(c.split("\n", 1)[1] if "\n" in c else "" for c in keep)


def paste(tmp_path: Path, root: Path, script: str,
          unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``script`` in ``sh -e`` from ``root``, the Buildkite tokens' variables set (those of
    ``unset`` left out, as in a shell where they were not read yet)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("kubectl", "gh", "glab"):
        tool = bin_dir / name
        tool.write_text(FAKE_TOOL.format(name=name))
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "CALLS": str(tmp_path / "calls"), "BUILDKITE_AGENT_TOKEN": "bk-agent-token-1234",
           "BUILDKITE_API_TOKEN": "bk-api-token-5678"}
    env = {name: value for name, value in env.items() if name not in unset}
    return subprocess.run(["sh", "-e", "-c", script], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("run_in", list(SCHEDULERS))
@pytest.mark.parametrize("gitops", ["argocd", "flux"])
def test_the_printed_steps_work_when_pasted_in_order(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, run_in: str, variant: str) -> None:
    """From DIR, steps 2 to 4 as printed: each file a command reads exists by then (the
    notify secret's file is made before `gh secret set` reads it; the Buildkite API token's
    file is made before its Secret), every path is relative to DIR, and no value is left to
    invent: the printed steps hold no CHANGE-ME."""
    root, out = scaffold(tmp_path, capsys, gitops, "--repo-url", URL, "--run-in", run_in,
                         *VARIANTS[variant])
    assert "CHANGE-ME" not in out.split("\nnext, from")[1]
    for name in USER_FILES:
        (root / name).write_text(f"{name}-value-0123456789\n")
    done = paste(tmp_path, root, printed_steps(out, 2, 4))
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text()
    assert "-value-0123456789" not in calls and "bk-a" not in calls  # files, never values
    if variant == "buildkite":
        assert (root / "buildkite-api-token").read_text() == "bk-api-token-5678"


@pytest.mark.parametrize(("unset", "file"), [("BUILDKITE_AGENT_TOKEN", "buildkite-agent-token"),
                                           ("BUILDKITE_API_TOKEN", "buildkite-api-token")])
def test_a_buildkite_token_not_read_yet_stops_the_paste_before_its_file(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, unset: str, file: str) -> None:
    """Step 2 pasted in a shell where the token's variable was never read: `printf '%s'
    "$BUILDKITE_AGENT_TOKEN"` wrote an empty file, and kubectl makes a Secret of an empty
    file without a word (agents that cannot register). The line stops there instead, and
    says how to give the variable its value."""
    root, out = scaffold(tmp_path, capsys, "flux", "--repo-url", URL, *VARIANTS["buildkite"])
    done = paste(tmp_path, root, printed_steps(out, 2, 2), unset=(unset,))
    assert done.returncode != 0
    assert f"read -rs {unset}" in done.stderr
    assert not (root / file).exists()
    calls = (tmp_path / "calls").read_text()
    assert f"create secret generic {file} " not in calls


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("run_in", ["github-actions", "gitlab"])
def test_ci_secrets_printed_are_those_the_scheduler_reads(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, run_in: str, variant: str) -> None:
    """GitHub Actions: a `gh secret set` per `secrets.X` of the workflow. GitLab: a `glab
    variable set` per variable the pipeline reads (gitscale.yaml's {env: …} and the git token),
    masked except a PEM key, which GitLab cannot mask (several lines). What gitscale.yaml
    offers in a comment (Buildkite's optional jobIds token) is offered commented out too."""
    root, out = scaffold(tmp_path, capsys, "flux", "--repo-url", URL, "--run-in", run_in,
                         *VARIANTS[variant])
    tool = "gh secret set" if run_in == "github-actions" else "glab variable set"
    printed = {m[1]: m[0] for m in re.finditer(rf"^{tool} (\w+)(.*)$", out, re.MULTILINE)}
    offered = set(re.findall(rf"^# {tool} (\w+)", out, re.MULTILINE))
    config = (root / "gitscale.yaml").read_text()
    commented = set(re.findall(r"^\s*#.*\{env: (\w+)\}", config, re.MULTILINE))
    assert bool(offered) == bool(commented) == (variant == "buildkite")
    if run_in == "github-actions":
        workflow = (root / ".github/workflows/gitscale.yml").read_text()
        assert set(printed) | offered == set(re.findall(r"\$\{\{ secrets\.(\w+) \}\}",
                                                        workflow))
        return
    # what a line reads; what a comment offers is offered commented out
    wanted = set(re.findall(r"^[^#\n]*\{env: (\w+)\}", config, re.MULTILINE)) | {
        "GITSCALE_GIT_TOKEN"}
    assert set(printed) == wanted and offered == commented
    for name, line in printed.items():
        pem = name == "GITHUB_APP_PRIVATE_KEY"
        assert ("--masked" in line) != pem and ("GitLab cannot mask it" in line) == pem, line
    assert "Settings > CI/CD > Variables" in out


def test_the_suggested_commands_run_from_the_folder_the_steps_are_given_from(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """`next, from config:` then `gitscale plan --repo config --demand config/demand.yaml`
    failed when run from config."""
    root, out = init(tmp_path, capsys, "flux", "--repo-url", URL, "--run-in", "cluster")
    where = re.search(r"^next, from (\S+)", out, re.MULTILINE)
    assert where and Path(where[1]) == root
    suggested = re.findall(r"`gitscale ([^`]+)`", out.split("\ntry ")[1])
    assert [s.split()[0] for s in suggested] == ["plan", "validate"]
    monkeypatch.chdir(root)
    assert [run(capsys, *s.split())[0] for s in suggested] == [2, 0]


@pytest.mark.parametrize("installation", [None, "7890"])
def test_the_app_secret_names_the_installation_only_when_init_knows_it(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, installation: str | None) -> None:
    """The controller and the source look the installation up when it is not given; a
    CHANGE-ME there would be taken for the id."""
    extra = ["--github-app-installation-id", installation] if installation else []
    root, out = init(tmp_path, capsys, "flux", "--repo-url", URL, "--github-app-id", "123",
                     *extra, "--run-in", "cluster")
    # the source looks it up too: nothing is left to edit either way
    assert "edits left: none" in out
    (settings,) = [s.source.settings for s in load_config(root).sets]
    assert settings.app is not None and settings.app.installation_id == installation
    secret = out[out.index("create secret generic github-app"):]
    secret = secret[:secret.index("private-key.pem")]
    assert "--from-literal=github_app_id=123" in secret
    assert ("github_app_installation_id" in secret) == (installation is not None)
    if installation:
        assert f"--from-literal=github_app_installation_id={installation} " in secret


@pytest.mark.parametrize("branch", ["main", "gitops"])
@pytest.mark.parametrize("platform", ["github", "buildkite"])
def test_the_workflow_says_github_schedules_from_the_default_branch(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, branch: str, platform: str) -> None:
    """The workflow reconciles the branch Argo CD / Flux follow, whichever branch holds it,
    and says the schedule runs only from the default branch; init says so too when --branch
    is not main. The GITHUB_TOKEN remark sits above GitHub's source credential only."""
    root, out = scaffold(tmp_path, capsys, "argocd", "--repo-url", URL, "--run-in",
                         "github-actions", "--branch", branch, *VARIANTS[platform])
    text = (root / ".github/workflows/gitscale.yml").read_text()
    assert "scheduled workflow only from the repository's default branch" in text
    workflow = yaml.safe_load(text)
    (job,) = workflow["jobs"].values()
    assert job["env"]["GITSCALE_BRANCH"] == branch
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["ref"] == "${{ env.GITSCALE_BRANCH }}"
    track = next(s["run"] for s in job["steps"] if "set-upstream-to" in s.get("run", ""))
    assert track.endswith('--set-upstream-to="origin/$GITSCALE_BRANCH"')
    step = next(line for line in lines(out) if line.startswith("5. "))
    assert ("default branch" in step) == (branch != "main")
    if branch != "main":
        assert f"make {branch} the default" in step
    lines_ = text.splitlines()
    source = next(i for i, line in enumerate(lines_)
                  if re.match(r"\s+(GITHUB_TOKEN|BUILDKITE_AGENT_TOKEN):", line))
    above = " ".join(line.strip() for line in lines_[source - 2:source])
    assert ("GITHUB_TOKEN can read only this repository" in text) == (platform == "github")
    if platform == "github":
        assert "GITHUB_TOKEN can read only this repository" in above
