"""`gitscale init`: each credential of the scaffold comes from where the scheduler it wrote
reads it, and its comments and steps say so. From CI, gitscale.yaml's comments name the
repository secret (GitHub Actions) or CI/CD variable (GitLab), not a cluster Secret; the
optional ``jobIds`` token, uncommented as the comment invites, reaches `gitscale` from the
secret init printed, set from a file of its own — never the controller's REST token's file
(the fake Buildkite answers the metrics API and GraphQL). In the cluster, deploy/scaler/README.md
makes serve's webhook secret and names the variant's own ``_FILE`` variables."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.commands.init_variants import init, options
from tests.commands.test_init_scaler import pods
from tests.commands.test_init_steps import USER_FILES, paste
from tests.demand.conftest import BK_TOKEN
from tests.demand.fake_buildkite import FakeBuildkite, Job
from tests.demand.test_buildkite import SOME_JOBS
from tests.helpers import git, run

URL = "https://git.example.com/ci/config.git"
GRAPHQL_TOKEN = "bkua_S3cr3tGraphQLToken0123456789"
REST_TOKEN = "bkua_S3cr3tRestReadAgents0123456789"


def ci_secrets(out: str, run_in: str) -> dict[str, tuple[str, bool]]:
    """secret or variable name → (the file it is set from, printed commented out)."""
    tool = "gh secret set" if run_in == "github-actions" else "glab variable set"
    return {m[2]: (m[3], bool(m[1])) for m in re.finditer(
        rf"^(# )?{tool} (\w+)[^<\n]*< (\S+)", out, re.MULTILINE)}


def ci_environment(root: Path, run_in: str, stored: dict[str, str]) -> dict[str, str]:
    """What the scheduler init wrote puts in gitscale's environment, given the repository
    secrets / CI/CD variables that exist (``stored``)."""
    if run_in == "gitlab":  # every CI/CD variable is a variable of the job, by its name
        return dict(stored)
    workflow = yaml.safe_load((root / ".github/workflows/gitscale.yml").read_text())
    (job,) = workflow["jobs"].values()
    (step,) = [s for s in job["steps"] if s.get("name") == "Reconcile"]
    env = {}
    for name, value in step["env"].items():
        secret = re.fullmatch(r"\$\{\{ secrets\.(\w+) \}\}", value)
        assert secret, (name, value)
        env[name] = stored.get(secret[1], "")  # GitHub: a secret that does not exist is ""
    return env


def uncomment_job_ids(root: Path, buildkite: FakeBuildkite) -> None:
    """What gitscale.yaml's comment invites (the queue is unclustered), with the fake's URLs."""
    config = root / "gitscale.yaml"
    text = config.read_text()
    commented = ("        # jobIds:\n"
                 "        #   token: {env: BUILDKITE_GRAPHQL_TOKEN}\n"
                 "        #   cluster: UUID-OF-THE-QUEUE-S-CLUSTER  # its Cluster ID (Agents >"
                 " the cluster > Settings); omit for an unclustered queue\n")
    assert commented in text
    text = text.replace(commented, "        jobIds:\n"
                        "          token: {env: BUILDKITE_GRAPHQL_TOKEN}\n"
                        f"          graphqlUrl: {buildkite.graphql_url}\n")
    text = text.replace("        queue: deploy", f"        apiUrl: {buildkite.url}\n"
                        "        queue: deploy", 1)
    config.write_text(text)
    git(root, "commit", "-qam", "jobIds")


@pytest.mark.parametrize("run_in", ["github-actions", "gitlab"])
@pytest.mark.parametrize("state", ["set", "missing", "commented-missing"])
def test_job_ids_token_reaches_gitscale_from_the_ci_secret_init_printed(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, run_in: str,
        state: str) -> None:
    root, out = init(tmp_path, capsys, "flux", "--platform", "buildkite", "--buildkite-org",
                     "test", "--buildkite-queue", "deploy", "--repo-url", URL, "--run-in",
                     run_in, "--notify-url", "https://flux.example.com")
    config = (root / "gitscale.yaml").read_text()
    assert "in the cluster" not in config  # no Secret gitscale-scaler from CI
    printed = ci_secrets(out, run_in)
    # the agent token is required; the GraphQL token optional (commented, as jobIds is), set
    # from its own file, which the printed steps write from a variable of its own
    optional = {name: file for name, (file, commented) in printed.items() if commented}
    (name,) = optional
    assert optional[name] == "./buildkite-graphql-token"
    assert ("printf '%s' \"${BUILDKITE_GRAPHQL_TOKEN:?not set: read -rs BUILDKITE_GRAPHQL_TOKEN}\""
            " > ./buildkite-graphql-token") in out
    assert "may\n# serve the controller as well" in out  # one token with both may serve both
    kind = "repository secret" if run_in == "github-actions" else "CI/CD variable"
    assert f"from the {kind} {name}" in config, config
    # the controller's REST token goes elsewhere: following both never mixes them
    assert "--from-file=token=./buildkite-api-token" in out
    assert "./buildkite-api-token" not in {file for file, _ in printed.values()}

    # the repository secrets / CI/CD variables, as the printed `gh`/`glab` lines set them
    files = {"./buildkite-agent-token": BK_TOKEN, "./buildkite-graphql-token": GRAPHQL_TOKEN,
             "./buildkite-api-token": REST_TOKEN}
    stored = {secret: files[file] for secret, (file, commented) in printed.items()
              if file in files and (state == "set" or not commented)}
    env = ci_environment(root, run_in, stored)
    assert env.get("BUILDKITE_AGENT_TOKEN") == BK_TOKEN
    assert env.get("BUILDKITE_GRAPHQL_TOKEN") == (GRAPHQL_TOKEN if state == "set" else
                                             "" if run_in == "github-actions" else None)
    for variable in ("BUILDKITE_AGENT_TOKEN", "BUILDKITE_GRAPHQL_TOKEN", "BUILDKITE_GRAPHQL_TOKEN_FILE",
                     "BUILDKITE_AGENT_TOKEN_FILE"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)

    with FakeBuildkite(token=BK_TOKEN, api_token=GRAPHQL_TOKEN) as buildkite:
        buildkite.queues["deploy"] = SOME_JOBS  # organization "test": 3 scheduled, 1 running
        buildkite.jobs["deploy"] = [Job("r1", "RUNNING")] + [
            Job(f"s{n}", "SCHEDULED") for n in (1, 2, 3)]
        if state == "commented-missing":  # the jobIds comment left as init wrote it
            config_file = root / "gitscale.yaml"
            config_file.write_text(config_file.read_text().replace(
                "        queue: deploy", f"        apiUrl: {buildkite.url}\n"
                "        queue: deploy", 1))
            git(root, "commit", "-qam", "the fake's URL")
        else:
            uncomment_job_ids(root, buildkite)
        code, plan_out, err = run(capsys, "plan", "--repo", str(root), "--output", "json")
        graphql = [r for r in buildkite.log if r.path.startswith("/graphql")]
    assert GRAPHQL_TOKEN not in plan_out + err and BK_TOKEN not in plan_out + err
    if state == "missing":  # uncommented without the secret: said, at its line
        assert code == 1, plan_out + err
        unset = "is empty" if run_in == "github-actions" else "is not set"
        said = plan_out + err
        assert re.search(rf"gitscale\.yaml:\d+: .*BUILDKITE_GRAPHQL_TOKEN {unset}", said), said
        assert graphql == []
        return
    assert code in (0, 2), plan_out + err  # 2: a change to commit
    assert "BUILDKITE_GRAPHQL_TOKEN" not in err
    if state == "set":  # the GraphQL API was asked, with the token from the CI secret
        assert graphql and all(r.authorization == f"Bearer {GRAPHQL_TOKEN}" and r.status == 200
                               for r in graphql)
    else:  # passed always (empty), read by nothing while jobIds is commented out
        assert graphql == []


VARIANTS = ["github", "ghes-app", "buildkite"]  # init_variants.COMPLETE


def credential_comments(config: str) -> dict[str, str]:
    """variable → the comment of the line of the set's source whose ``{env: …}`` names it;
    for a commented-out one (jobIds), the comment lines above it."""
    found = {}
    source = config[config.index("\n    source:\n"):config.index("\n    policy:")]
    lines = source.splitlines()
    for i, line in enumerate(lines):
        match = re.search(r"\{env: (\w+)\}", line)
        if not match:
            continue
        if line.lstrip().startswith("#"):
            above = [x.strip() for x in lines[max(0, i - 6):i] if x.lstrip().startswith("#")]
            found[match[1]] = " ".join(above)
        else:
            found[match[1]] = line.split("#", 1)[1]
    return found


@pytest.mark.parametrize("run_in", ["github-actions", "gitlab", "cluster"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_credential_comments_name_where_the_scheduler_reads_each(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, run_in: str, variant: str) -> None:
    root, _ = init(tmp_path, capsys, "flux", *options("flux", variant, True, run_in))
    comments = credential_comments((root / "gitscale.yaml").read_text())
    assert set(comments) >= {"BUILDKITE_AGENT_TOKEN", "BUILDKITE_GRAPHQL_TOKEN"} if \
        variant == "buildkite" else len(comments) == 1
    if run_in == "github-actions":
        workflow = yaml.safe_load((root / ".github/workflows/gitscale.yml").read_text())
        (job,) = workflow["jobs"].values()
        (step,) = [s for s in job["steps"] if s.get("name") == "Reconcile"]
        wanted = {v: "the repository secret " + re.fullmatch(
            r"\$\{\{ secrets\.(\w+) \}\}", step["env"][v])[1]  # type: ignore[index]
            for v in comments}
    elif run_in == "gitlab":
        wanted = {v: f"the CI/CD variable {v}" for v in comments}
    else:
        (container,) = dict(pods(root))["deployment-run.yaml"]["containers"]
        keys = {e["name"].removesuffix("_FILE"): e["value"].rsplit("/", 1)[1]
                for e in container["env"]}
        wanted = {v: f"key {keys[v]} of the Secret gitscale-scaler" for v in comments}
    for variable, comment in comments.items():
        assert wanted[variable] in comment, (variable, comment)
        assert ("in the cluster" in comment) == (run_in == "cluster"), comment


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_scaler_readme_steps_work_pasted_and_name_the_variants_own_files(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, variant: str) -> None:
    """deploy/scaler/README.md's commands, pasted once the files a user brings (and those
    init's printed steps made) exist: each file a command reads is made first — serve's
    webhook secret too, a random value without a newline, which the README says to give
    GitHub's webhook form. Its rotation paragraph names the variant's own ``NAME_FILE``."""
    root, _ = init(tmp_path, capsys, "flux", *options("flux", variant, True, "cluster"))
    readme = (root / "deploy/scaler/README.md").read_text()
    for name in [*USER_FILES, "flux-receiver-token", "buildkite-agent-token"]:
        (root / name).write_text(f"{name}-value-0123456789\n")
    (script,) = re.findall(r"```sh\n(.*?)```", readme, re.DOTALL)
    done = paste(tmp_path, root, script)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text()
    serve = variant != "buildkite"
    assert ("create secret generic gitscale-webhook --from-file=secret=./webhook-secret"
            in calls) == serve
    if serve:
        secret = (root / "webhook-secret").read_text()
        assert re.fullmatch(r"[0-9a-f]{64}", secret), secret  # no newline
        form = " ".join(line.lstrip("# ") for line in script.splitlines()
                        if line.startswith("#"))
        assert all(words in form for words in (
            "Settings > Webhooks", "Payload URL", "/webhook", "application/json",
            "Secret the content of ./webhook-secret", '"Workflow jobs"'))
    (container,) = dict(pods(root))["deployment-run.yaml"]["containers"]
    own = {e["name"] for e in container["env"]} - {"GITSCALE_GIT_TOKEN_FILE",
                                                     "GITSCALE_CACHE_DIR"}
    rotating = readme[readme.index("Rotating a credential"):]
    rotating = rotating[:rotating.index("mounted as files")]
    assert set(re.findall(r"`(\w+_FILE)`", rotating)) == own, rotating
    assert ("webhook secret" in rotating) == serve


def test_the_readme_names_what_init_writes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """README: Troubleshooting's `git log -p` path is the RunnerSet init writes, and the init
    section names every ``NAME_FILE`` the scaler's pods of any variant point at."""
    from tests.ship.shipfiles import ROOT

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Scaffolding: `gitscale init`"):
                     readme.index("### The controller: `gitscale controller`")]
    named: set[str] = set()
    for variant in VARIANTS:
        root, _ = init(tmp_path, capsys, "flux", *options("flux", variant, True),
                       name=variant)
        (container,) = dict(pods(root))["deployment-run.yaml"]["containers"]
        named |= {e["name"] for e in container["env"] if e["name"].endswith("_FILE")}
        if variant == "github":  # the default --path
            paths = re.findall(r"`git log -p -- (\S+)`", readme)
            assert paths and all((root / path).is_file() for path in paths), paths
    assert "BUILDKITE_GRAPHQL_TOKEN_FILE" in named
    assert all(f"`{name}`" in section for name in named), named


# How the docs name a CI secret: "the repository secret `X`", `gh secret set X` (GitHub
# Actions); "the CI/CD variable `X`", `glab variable set X` (GitLab).
DOC_SECRETS = {
    "github-actions": re.compile(r"repository secret `([A-Z][A-Z0-9_]*)`|gh secret set ([A-Z][A-Z0-9_]*)"),
    "gitlab": re.compile(r"CI/CD variable `([A-Z][A-Z0-9_]*)`|glab variable set ([A-Z][A-Z0-9_]*)"),
}


def doc_secrets(text: str, run_in: str) -> set[str]:
    return {a or b for a, b in DOC_SECRETS[run_in].findall(text)} - {"NAME"}


def test_the_ci_secret_check_reads_both_spellings() -> None:
    text = ("the repository secret `A_B`; `gh secret set C < f`; the CI/CD variable `D`; "
            "`glab variable set E --masked < f`; `gh secret set NAME < FILE`")
    assert doc_secrets(text, "github-actions") == {"A_B", "C"}
    assert doc_secrets(text, "gitlab") == {"D", "E"}


@pytest.mark.parametrize("run_in", ["github-actions", "gitlab"])
def test_every_ci_secret_the_docs_name_is_one_init_prints(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                          run_in: str) -> None:
    """A repository secret or CI/CD variable the README or docs/ tell a reader to set is one
    that init's steps set and its scheduler reads (the README once named a GitLab variable
    for the jobIds token that nothing reads)."""
    from tests.ship.shipfiles import ROOT

    printed: set[str] = set()
    for gitops in ("argocd", "flux"):
        for variant in VARIANTS:
            _, out = init(tmp_path, capsys, gitops, *options(gitops, variant, True, run_in),
                          name=f"{gitops}-{variant}")
            printed |= set(ci_secrets(out, run_in))
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {(page.name, name) for page in pages
             for name in doc_secrets(page.read_text(), run_in)}
    assert len(named) >= 3  # the pattern still finds them
    assert sorted((page, name) for page, name in named if name not in printed) == []


def test_the_agent_token_step_says_where_a_clustered_token_and_queue_live(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """A Buildkite organization runs its agents in clusters (unclustered tokens are Buildkite's
    deprecated kind): the agent token must be one of the queue's cluster, found under the
    cluster, and the queue must exist there before an agent targets it."""
    _, out = init(tmp_path, capsys, "flux", "--platform", "buildkite", "--buildkite-org",
                  "acme", "--buildkite-queue", "linux", "--repo-url", URL)
    step = out[:out.index("kubectl -n ci-runners create secret generic buildkite-agent-token")]
    comment = " ".join(line.lstrip("# ") for line in step.splitlines()[-4:])
    assert "Agents > the cluster > Agent Tokens" in comment, comment
    assert "queue linux must exist in that cluster" in comment, comment


def glance_rows() -> list[list[str]]:
    """The cells of each row of docs/credentials.md's "Every Secret at a glance"."""
    from tests.ship.shipfiles import ROOT

    text = (ROOT / "docs" / "credentials.md").read_text()
    section = text[text.index("## Every Secret at a glance"):]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) >= 8, rows
    return rows


@pytest.mark.parametrize(("gitops", "variant"), [("flux", "buildkite"), ("flux", "github"),
                                                 ("argocd", "github")])
def test_every_secret_init_prints_is_in_the_secrets_at_a_glance(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, variant: str) -> None:
    """Each `kubectl create secret` line init prints (sync in seconds' included) has its row in
    credentials.md's table of every Secret: its namespace, its name (or, in the runners'
    namespace, the RunnerSet field that names it) and each key. Flux's Receiver token Secret
    was missing from it."""
    root, out = init(tmp_path, capsys, gitops, *options(gitops, variant, True, "cluster"))
    runnerset = next(yaml.safe_load_all((root / "clusters/prod/runnersets").glob(
        "*.yaml").__next__().read_text()))
    fields = {f"spec.{platform}.{field}": value for platform in ("github", "buildkite")
              for field, value in (runnerset["spec"].get(platform) or {}).items()}
    commands = re.sub(r"\\\n\s*", " ", out).splitlines()
    created = [c.split() for c in commands if " create secret generic " in c]
    assert len(created) >= 4, out
    rows = glance_rows()
    for words in created:
        namespace, name = words[2], words[6]
        keys = [w.split("=")[1] for w in words if w.startswith(("--from-file=",
                                                                 "--from-literal="))]
        named_by = [field for field, value in fields.items() if value == name]
        row = [r for r in rows if f"`{namespace}`" in r[0] and (
            f"`{name}`" in r[1] or any(f"`{field}`" in r[1] for field in named_by))]
        assert row, f"no row for Secret {namespace}/{name}: {' '.join(words)}"
        assert all(f"`{key}`" in " ".join(row[0]) for key in keys), (row, keys)
