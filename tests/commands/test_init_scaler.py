"""`gitscale init`'s in-cluster scaler (deploy/scaler/): the demand source's credential comes from
the Secret docs/credentials.md names, under the keys it lists, mounted as files that the
variables' ``_FILE`` twins point at (a rotated Secret reaches a running pod), never as a value;
the CronJob keeps its state cache on a claim the image's user may write."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gitscale.config.load import load_config
from tests.commands.init_variants import ALL, docs, init, options
from tests.ship.shipfiles import ROOT

CREDENTIALS = ROOT / "docs" / "credentials.md"
NOT_SECRET = {"GITSCALE_GIT_TOKEN_FILE", "GITSCALE_CACHE_DIR"}  # plain values besides NAME_FILE
NOTIFY_DIR = "/var/run/secrets/gitscale/notify"  # where credentials.md says gitscale-notify is


def documented_keys() -> dict[str, str]:
    """key of gitscale-scaler → the variable it fills, from the table in credentials.md."""
    rows = re.findall(r"^\s*\| `(\w+)` \| `(\w+)` \|", CREDENTIALS.read_text(), re.M)
    table = dict(rows)
    assert len(table) >= 3, rows
    return table


def pods(root: Path) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((root / "deploy/scaler").glob("*.yaml")):
        for obj in docs(path):
            if obj["kind"] == "CronJob":
                found.append((path.name, obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
            elif obj["kind"] == "Deployment":
                found.append((path.name, obj["spec"]["template"]["spec"]))
    return found


def source_variables(root: Path) -> set[str]:
    """The environment variables the set's source in gitscale.yaml reads."""
    settings = load_config(root).sets[0].source.settings
    refs = [getattr(settings, "token", None)]
    app = getattr(settings, "app", None)
    if app is not None:
        refs.append(app.private_key)
    return {r.where for r in refs if r is not None and r.kind == "env"}


def test_run_and_serve_stop_within_their_grace_period(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """Each long-running pod's --shutdown-timeout (what the pass or last batch in flight gets
    after SIGTERM) leaves at least 10 s of its terminationGracePeriodSeconds: to say what was
    not landed and exit before Kubernetes kills it (150 s were overrun by serve's 3 tries of a
    push a hung git server held for up to 120 s each)."""
    from gitscale.repo.deadline import seconds_of

    root, _ = init(tmp_path, capsys, "flux", "--github-org", "acme", "--run-in", "cluster")
    found = {}
    for name, spec in pods(root):
        if not name.startswith("deployment-"):
            continue
        args = spec["containers"][0]["args"]
        timeout = seconds_of("--shutdown-timeout", args[args.index("--shutdown-timeout") + 1])
        found[args[0]] = (timeout, spec["terminationGracePeriodSeconds"])
    assert found == {"run": (20.0, 30), "serve": (20.0, 30)}
    text = (root / "deploy/scaler/deployment-serve.yaml").read_text()
    assert "terminationGracePeriodSeconds (30) leaves 10 s more: raise both together" in text


@pytest.mark.parametrize(("gitops", "variant", "complete"), ALL)
def test_the_scaler_reads_the_source_credential_from_the_documented_secret_keys(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, variant: str, complete: bool) -> None:
    root, out = init(tmp_path, capsys, gitops, *options(gitops, variant, complete))
    table = documented_keys()
    wanted = source_variables(root)
    assert wanted  # every variant's source reads a credential from the environment
    found = pods(root)
    assert len(found) == (2 if variant == "buildkite" else 3)  # serve is GitHub's only
    readme = (root / "deploy/scaler/README.md").read_text()
    assert ("deployment-serve.yaml" in readme) == ("gitscale-webhook" in readme) == (
        variant != "buildkite")
    for name, spec in found:
        (container,) = spec["containers"]
        assert not any("valueFrom" in env for env in container["env"]), name  # files only
        # gitscale-scaler, one projected volume: required keys from one source, the optional
        # jobIds key from a second, optional one (the pod starts without it)
        (volume,) = [v for v in spec["volumes"] if "gitscale-scaler" in str(v)]
        required, optional_keys = set(), set()
        for source in volume["projected"]["sources"]:
            secret = source["secret"]
            assert secret["name"] == "gitscale-scaler"
            assert all(item["path"] == item["key"] for item in secret["items"])
            (optional_keys if secret.get("optional") else required).update(
                item["key"] for item in secret["items"])
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True
        refs, optional = {}, {}
        for env in container["env"]:
            assert "value" in env, (name, env)
            if env["name"] in NOT_SECRET or env["value"].startswith(NOTIFY_DIR + "/"):
                continue  # (the notify entry's secret: its own test below)
            variable, value = env["name"].removesuffix("_FILE"), env["value"]
            assert env["name"] == f"{variable}_FILE", (name, env)
            directory, key = value.rsplit("/", 1)
            assert directory == mount["mountPath"], (name, env)
            (optional if key in optional_keys else refs)[variable] = key
            assert key in required | optional_keys, (name, key)
        # exactly the variables gitscale.yaml reads, each from the key the doc gives it; and
        # the one its commented jobIds would read (Buildkite), from an optional key
        assert set(refs) == wanted, name
        assert set(refs.values()) == required, name
        assert all(table[key] == variable for variable, key in refs.items()), (name, refs)
        assert optional == ({"BUILDKITE_GRAPHQL_TOKEN": "buildkite_graphql_token"}
                            if variant == "buildkite" else {}), (name, optional)
        assert all(table[key] == variable for variable, key in optional.items())
        if optional:
            assert "# jobIds:" in (root / "gitscale.yaml").read_text()
            assert "#   token: {env: BUILDKITE_GRAPHQL_TOKEN}" in (root / "gitscale.yaml").read_text()
    keys = set(refs.values())
    # the Secret at a glance lists them, and init's kubectl line creates them from files
    glance = next(line for line in CREDENTIALS.read_text().splitlines()
                  if line.startswith("| `gitscale-system` | `gitscale-scaler` |"))
    assert all(f"`{key}`" in glance for key in keys)
    command = re.search(r"create secret generic gitscale-scaler(?:[^\n]*\\\n)*[^\n]*",
                        out).group(0)  # with its continuation lines
    assert {m for m in re.findall(r"--from-file=(\w+)=\./", command)} == keys
    # no token is ever a literal: only the GitHub App's ids, and the repository Secret's
    # type, URL and user name (Argo CD's, Flux's)
    literals = dict(re.findall(r"--from-literal=(\w+)=(\S+)", out))
    assert set(literals) <= {"github_app_id", "github_app_installation_id", "type", "url",
                             "username"}
    assert {literals.get("type", "git"), literals.get("username", "git")} == {"git"}
    assert literals.get("url", "https://").startswith("https://")
    # the GitHub workflow (the other --run-in) passes the same variables, from repository
    # secrets; init prints how to set each from its file
    gh, out = init(tmp_path, capsys, gitops, *options(gitops, variant, complete,
                                                      "github-actions"), name="gh")
    assert not (gh / "deploy").exists() and not (gh / ".gitlab-ci.yml").exists()
    workflow = (gh / ".github/workflows/gitscale.yml").read_text()
    for variable in wanted:
        (secret,) = re.findall(rf"^\s+{variable}: \$\{{\{{ secrets\.(\w+) }}}}$", workflow, re.M)
        assert not secret.startswith("GITHUB_")  # GitHub refuses such secret names
        assert re.search(rf"^gh secret set {secret} < \./[\w.-]+$", out, re.M), secret


def test_the_cronjob_keeps_its_cache_on_a_claim_its_user_may_write(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    root, _ = init(tmp_path, capsys, "flux", "--github-org", "acme", "--run-in", "cluster")
    (claim,) = docs(root / "deploy/scaler/cache-pvc.yaml")
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    for name, spec in pods(root):
        (container,) = spec["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        cache = volumes[mounts[env["GITSCALE_CACHE_DIR"]]]
        if name == "cronjob.yaml":  # one pass at a time: one writer of the claim
            assert cache["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
        else:  # a long-lived process keeps its cache in memory between passes
            assert cache["emptyDir"] == {}
        # the image's user (uid 65532) owns what it writes: fsGroup; /tmp is an emptyDir,
        # which is not mounted noexec (git runs its askpass script from there)
        context = spec["securityContext"]
        assert context["runAsUser"] == context["fsGroup"] == 65532
        assert volumes[mounts["/tmp"]] == {"name": "tmp", "emptyDir": {}}
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert "HOME" not in env  # the image's HOME, only ever read


def test_serve_reads_its_webhook_secret_from_a_secret_volume(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """A rotated webhook secret reaches the running pod (a Secret volume is updated in place,
    a variable never is): serve is given the file, and reads it again when it changes."""
    root, _ = init(tmp_path, capsys, "flux", "--github-org", "acme", "--run-in", "cluster")
    spec = dict(pods(root))["deployment-serve.yaml"]
    (container,) = spec["containers"]
    assert "GITHUB_WEBHOOK_SECRET" not in {e["name"] for e in container["env"]}
    args = container["args"]
    path = args[args.index("--secret-file") + 1]
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert mount["readOnly"] is True and path == f"{mount['mountPath']}/secret"
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["secret"] == {"secretName": "gitscale-webhook"}  # its key `secret`
    for name, other in pods(root):  # run and reconcile never see it
        if name != "deployment-serve.yaml":
            assert "gitscale-webhook" not in str(other)


@pytest.mark.parametrize(("gitops", "variant", "complete"), ALL)
def test_the_pods_variables_lead_gitscale_to_the_mounted_keys(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, gitops: str, variant: str,
        complete: bool) -> None:
    """The Deployment's environment, with its Secret volume laid out as the kubelet lays it
    out (each key a file under the mount path), makes gitscale.yaml's ``{env: NAME}`` read
    each key's file — the token that `gitscale run` then re-reads as the Secret rotates."""
    from gitscale.config.rotating import Rotating

    root, _ = init(tmp_path, capsys, gitops, *options(gitops, variant, complete))
    spec = dict(pods(root))["deployment-run.yaml"]
    (container,) = spec["containers"]
    (volume,) = [v for v in spec["volumes"] if "gitscale-scaler" in str(v)]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    kubelet = tmp_path / "kubelet-volume"
    kubelet.mkdir()
    for source in volume["projected"]["sources"]:
        for item in source["secret"]["items"]:
            (kubelet / item["path"]).write_text(f"value-of-{item['key']}-0123456789\n")
    for env in container["env"]:
        monkeypatch.setenv(env["name"], env["value"].replace(mount["mountPath"], str(kubelet)))
    for variable in source_variables(root):
        monkeypatch.delenv(variable, raising=False)
        token = Rotating({"env": variable}, variable)
        assert token.rotates and token.get().startswith("value-of-"), variable
        assert token.get() == f"value-of-{documented_keys_of(variable)}-0123456789"


def documented_keys_of(variable: str) -> str:
    (key,) = [k for k, v in documented_keys().items() if v == variable]
    return key


@pytest.mark.parametrize(("gitops", "variant", "complete"), ALL)
def test_the_notify_secret_is_a_file_of_gitscale_notify_in_every_pod(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, gitops: str, variant: str,
        complete: bool) -> None:
    """gitscale.yaml's notify entry names ``{env: NAME}``; every pod (the CronJob, run, serve)
    points ``NAME_FILE`` at the key NAME of the optional Secret gitscale-notify, mounted as
    files, and loads no Secret as variables (a running pod never sees a variable change, and
    ``NAME`` beside ``NAME_FILE`` is refused). Laid out as the kubelet lays the volume out, the
    pod's environment makes gitscale read that key, and the key the kubelet swapped in after
    an update."""
    from gitscale.config.secrets import read_secret
    from tests.notify.test_notify_rotation import Volume

    root, out = init(tmp_path, capsys, gitops, *options(gitops, variant, complete))
    (target,) = load_config(root).notify
    assert target.secret is not None
    variable = target.secret["env"]
    assert variable == {"flux": "FLUX_RECEIVER_TOKEN", "argocd": "ARGOCD_WEBHOOK_SECRET"}[gitops]
    found = pods(root)
    assert {name for name, _ in found} >= {"cronjob.yaml", "deployment-run.yaml"}
    for name, spec in found:
        (container,) = spec["containers"]
        assert "envFrom" not in container, name
        env = {e["name"]: e for e in container["env"]}
        assert variable not in env, name
        path = env[f"{variable}_FILE"]["value"]
        assert path == f"{NOTIFY_DIR}/{variable}", name
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == NOTIFY_DIR]
        assert mount["readOnly"] is True
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        # every key of the Secret a file; the pod starts before the Secret exists
        assert volume == {"name": mount["name"],
                          "secret": {"secretName": "gitscale-notify", "optional": True}}
    # init's printed step and deploy/scaler/README.md create that key from a file
    line = rf"^kubectl -n gitscale-system create secret generic gitscale-notify " \
        rf"--from-file={variable}=\./[\w-]+$"
    readme = (root / "deploy/scaler/README.md").read_text()
    assert re.search(line, out, re.M) and re.search(line, readme, re.M)
    assert f"`{variable}_FILE`" in readme and NOTIFY_DIR in readme
    assert "rollout restart" not in readme and "envFrom" not in readme
    # the pod's environment over the kubelet's layout of the volume
    spec = dict(found)["deployment-run.yaml"]
    (container,) = spec["containers"]
    volume = Volume(tmp_path / "kubelet-notify", {variable: "engine-secret-before-1f2e"})
    for env in container["env"]:
        monkeypatch.setenv(env["name"], env["value"].replace(NOTIFY_DIR, str(volume.root)))
    monkeypatch.delenv(variable, raising=False)
    assert read_secret(target.secret, "token") == "engine-secret-before-1f2e"
    volume.update({variable: "engine-secret-after-93ab"})
    assert read_secret(target.secret, "token") == "engine-secret-after-93ab"


def test_each_secret_mount_is_named_after_its_secret() -> None:
    """A missing key's error names the Secret from the file's folder
    (``files.mounted_secret_hint``): every folder init mounts a Secret at is its name's."""
    from pathlib import Path

    from gitscale.commands import init_notify, init_runners, init_scaler
    from gitscale.files import mounted_secret_hint

    for folder, secret in [(init_notify.NOTIFY_DIR, init_notify.NOTIFY_SECRET),
                           (init_runners.SCALER_DIR, init_runners.SCALER_SECRET),
                           (init_scaler.TOKEN_DIR, init_scaler.GIT_SECRET),
                           (init_scaler.WEBHOOK_DIR, init_scaler.WEBHOOK_SECRET)]:
        assert mounted_secret_hint(Path(folder) / "k") == f' (the key "k" of Secret {secret}?)'
    assert mounted_secret_hint(Path("/etc/gitscale/k")) == ""


@pytest.mark.parametrize("variant", ["github", "buildkite"])
def test_the_steps_offer_serve_only_where_init_wrote_it(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                         variant: str) -> None:
    """`serve` takes GitHub's webhooks: a Buildkite scaffold has no serve Deployment, and
    neither its step 5 nor the comment of deploy/scaler/kustomization.yaml (what to swap in
    for `run` or `serve`) sends the reader to one."""
    root, out = init(tmp_path, capsys, "flux", *options("flux", variant, True))
    (step,) = [line for line in out.splitlines() if line.startswith("5. ")]
    has_serve = (root / "deploy/scaler/deployment-serve.yaml").exists()
    assert has_serve == (variant == "github")
    assert ("`serve`" in step) == has_serve, step
    swap = (root / "deploy/scaler/kustomization.yaml").read_text().split("apiVersion:")[0]
    assert ("deployment-serve.yaml" in swap) == has_serve, swap
    assert ("`run` or `serve`" in swap) == has_serve, swap
    assert "deployment-run.yaml" in swap and "`run`" in swap, swap
    assert "`run`" in step
    readme = (root / "deploy/scaler/README.md").read_text()
    assert "Create the namespaces, then" in readme


@pytest.mark.parametrize(("gitops", "variant", "complete"), ALL[:1])
def test_the_scaler_logs_text_and_its_readme_says_how_to_log_json(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, variant: str, complete: bool) -> None:
    """The manifests leave the log format at its default; the README's line gives the
    ``env:`` entry that switches a Deployment to JSON, as a container's ``env:`` takes it."""
    import yaml

    root, _ = init(tmp_path, capsys, gitops, *options(gitops, variant, complete))
    for _, spec in pods(root):
        for container in spec["containers"]:
            assert "GITSCALE_LOG_FORMAT" not in {e["name"] for e in container.get("env", [])}
    readme = (root / "deploy/scaler/README.md").read_text()
    (entry,) = re.findall(r"`(\{name: GITSCALE_LOG_FORMAT[^`]*\})`", readme)
    assert yaml.safe_load(entry) == {"name": "GITSCALE_LOG_FORMAT", "value": "json"}
