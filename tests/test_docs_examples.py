"""The RunnerSet examples in docs/ are valid, and the docs show exactly the example files; and
what the docs and the files gitscale writes tell a new user is what gitscale does.

Every ``docs/examples/*.yaml`` holds one RunnerSet (and, for some, the objects it needs): the
RunnerSet passes gitscale's own in-process validation against the shipped CRD (the check
`reconcile` runs before it commits), its pod template passes the Kubernetes schema of a Pod
(strict: the CRD keeps the template's fields unchecked, the API server would refuse a typo only
when the controller creates the pod), and every other object passes the Kubernetes schema.
Every ```yaml block of docs/pod-templates.md is one of those files, byte for byte, and every
file is shown there, so the page and the tested files cannot drift apart.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gitscale.controller.observe import parse_runnerset, runner_container
from gitscale.controller.platforms import kind_of
from gitscale.controller.podspec import runner_pod
from gitscale.manifest.target import KINDS
from gitscale.manifest.crd_schemas import SchemaValidator
from tests.helpers import run
from tests.ship.pod_security import level

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.yaml"))
PAGE = ROOT / "docs" / "pod-templates.md"
KUBERNETES = ["1.30.0", "1.37.0"]  # as tests/test_init_ops.py: an old supported release, the newest


def objects(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def runnerset(path: Path) -> dict[str, Any]:
    (found,) = [o for o in objects(path) if o.get("kind") == "RunnerSet"]
    return found


def fenced_blocks(text: str, lang: str) -> list[str]:
    """The text of every ```LANG block, in the page's order."""
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def yaml_blocks(text: str) -> list[str]:
    return fenced_blocks(text, "yaml")


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_runnerset_is_valid_against_the_crd(path: Path) -> None:
    obj = runnerset(path)
    assert obj["apiVersion"] == "gitscale.dev/v1alpha1"
    assert SchemaValidator().check(obj) == []


@pytest.mark.parametrize("kubernetes", KUBERNETES)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_pod_template_and_the_other_objects_are_valid_kubernetes(path: Path,
                                                                     kubernetes: str) -> None:
    for obj in objects(path):
        if obj.get("kind") == "RunnerSet":
            template = obj["spec"]["template"]
            meta = {"name": "runner-abc123", "namespace": obj["metadata"]["namespace"],
                    **(template.get("metadata") or {})}
            obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                   "spec": {**template["spec"], "restartPolicy": "Never"}}
        kubernetes_validate.validate(obj, kubernetes, strict=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_images_are_pinned_and_the_runner_container_is_as_documented(path: Path) -> None:
    obj = runnerset(path)
    spec = obj["spec"]["template"]["spec"]
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        assert ":" in container["image"] and not container["image"].endswith(":latest")
    runner = runner_container(obj["spec"]["template"])
    (container,) = [c for c in spec["containers"] if c["name"] == runner]
    if obj["spec"]["platform"] == "github":
        assert runner == "runner"
        assert container["image"].startswith("ghcr.io/actions/actions-runner:")
        assert container.get("command") == ["/home/runner/run.sh"]
    else:  # buildkite/agent: its entrypoint runs `buildkite-agent start`
        assert container["image"].startswith("buildkite/agent:")
        assert "command" not in container and "args" not in container


def test_every_yaml_block_of_the_page_is_an_example_file_and_every_file_is_shown() -> None:
    files = {path.name: path.read_text() for path in EXAMPLES}
    shown = set()
    for block in yaml_blocks(PAGE.read_text()):
        matches = [name for name, text in files.items() if text == block]
        assert matches, f"a ```yaml block of {PAGE.name} is no file of docs/examples:\n{block}"
        shown.update(matches)
    assert shown == set(files), f"not shown in {PAGE.name}: {sorted(set(files) - shown)}"


def test_the_page_names_each_file_above_its_block() -> None:
    text = PAGE.read_text()
    for path in EXAMPLES:
        assert f"examples/{path.name}" in text, path.name


def documented_levels() -> dict[str, str]:
    """The Pod Security level the page's table gives each example file."""
    section = PAGE.read_text().split("## Pod Security\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([\w.-]+\.yaml)` \| (\w+)", section, re.MULTILINE))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_page_says_the_pod_security_level_each_example_needs(path: Path) -> None:
    """The strictest Pod Security Standard the runner pod meets (tests/ship/pod_security.py)
    is the one the page's table names, for the pod as the controller makes it from the
    template: it adds nothing that would lower it."""
    obj = runnerset(path)
    template = obj["spec"]["template"]
    annotations = (template.get("metadata") or {}).get("annotations")
    meets = level(template["spec"], annotations)
    obj = {**obj, "metadata": {**obj["metadata"], "uid": "0a1b"}}
    view = parse_runnerset(obj, kind_of)
    pod = runner_pod(view, "runner-0a1b-abc123", 1, 0, [{"name": "X", "value": "y"}])
    assert level(pod["spec"], pod["metadata"]["annotations"]) == meets
    assert documented_levels().get(path.name) == meets, path.name
    if meets == "restricted":
        # runAsNonRoot with an image whose USER is a name (actions-runner's `runner`): the
        # kubelet refuses to start the container unless the uid is given by number
        spec = template["spec"]
        users = [c.get("securityContext", {}).get("runAsUser",
                                                  spec["securityContext"].get("runAsUser"))
                 for c in spec["containers"]]
        assert all(isinstance(u, int) and u > 0 for u in users), users


def test_the_pod_security_table_names_only_example_files() -> None:
    assert set(documented_levels()) == {path.name for path in EXAMPLES}


def owned_spec_fields() -> list[str]:
    owned = KINDS[("gitscale.dev/v1alpha1", "RunnerSet")]
    paths = [owned.replicas, owned.patch_id, owned.effective_time, owned.backlog]
    return [".".join(path) for path in paths if path is not None]


@pytest.mark.parametrize("platform", ["github", "buildkite"])
def test_the_runnerset_init_writes_names_every_field_gitscale_owns(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                                   platform: str) -> None:
    """Its head comment says what gitscale owns and that "everything else is yours": a field
    left out of it (spec.backlog was) reads as the user's to edit."""
    root = tmp_path / "config"
    code, _, err = run(capsys, "init", str(root), "--gitops", "flux", "--platform", platform)
    assert code == 0, err
    text = (root / "clusters/prod/runnersets/linux.yaml").read_text()
    head = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "everything else is yours" in head
    for field in owned_spec_fields():
        assert field in head, field


def test_the_demo_manifest_names_every_field_gitscale_owns() -> None:
    text = (ROOT / "gitscale/data/demo/clusters/prod/linux-x64.yaml").read_text()
    head = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "Humans own everything but" in head
    for field in owned_spec_fields():
        assert field in head, field


def block_after(text: str, marker: str, lang: str = "sh") -> str:
    start = text.index(marker)
    found = re.search(rf"^```{lang}\n(.*?)^```$", text[start:], re.MULTILINE | re.DOTALL)
    assert found, f"no ```{lang} block after {marker!r}"
    return found.group(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("openssl") is None,
                    reason="needs curl and openssl")
def test_the_readme_serve_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """README "Trying it without GitHub": init, serve, a delivery signed by openssl and sent by
    curl, history — as a user pastes it, with only the folder and the port moved."""
    block = block_after((ROOT / "README.md").read_text(), "**Trying it without GitHub.**")
    script = block.replace("/tmp/try", str(tmp_path / "try")).replace(
        "127.0.0.1:8080", f"127.0.0.1:{free_port()}")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('{"accepted": true}\n'), done.stdout
    (row,) = [line for line in done.stdout.splitlines() if " 0→1 " in line]
    assert row.split()[2:] == ["linux", "0→1", "1", "1q+0r", "scale-up"], done.stdout
    assert "batch of 1 event: committed" in done.stderr


DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md",
        ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "deploy").rglob("README.md"))]


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces
    to hyphens, a repeated one numbered (-1, -2 …); headings inside code blocks are none."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, n = base, 0
        while anchor in found:
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def test_heading_anchors_are_githubs(tmp_path: Path) -> None:
    """The slugs GitHub renders: code spans and punctuation dropped, a repeat numbered, a
    heading in a code block none."""
    page = tmp_path / "page.md"
    page.write_text("# Reading it back: `gitscale history`\n\n## Known limits\n\n"
                    "## Known limits\n\n```sh\n# not a heading\n```\n### GitOps sync, in 5 s!\n")
    assert heading_anchors(page) == {"reading-it-back-gitscale-history", "known-limits",
                                     "known-limits-1", "gitops-sync-in-5-s"}


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_within_the_repo_reaches_a_file_and_a_heading(page: Path) -> None:
    """A section renamed leaves its links pointing nowhere; a reader lands on the page top."""
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in heading_anchors(target):
            broken.append(f"{link}: no such heading in {target.name}")
    assert broken == [], broken


def docs_pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "deploy").rglob("README.md"))]


def options_named(text: str, commands: dict[str, set[str]]) -> list[tuple[str, str, str]]:
    """(command, option, the code span) of every ``--option`` a code span gives a command:
    `gitscale plan --set S`, `serve --window 10s`, a command table's first cell."""
    found = []
    for span in re.findall(r"`([^`\n]+)`", text):
        words = span.strip().removeprefix("gitscale ").split(None, 1)
        if len(words) == 2 and words[0] in commands:
            found += [(words[0], option, span)
                      for option in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", words[1])]
    return found


def command_options() -> dict[str, set[str]]:
    from gitscale.cli import cli

    return {name: {opt for param in command.params
                   for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]}
            for name, command in cli.commands.items()}  # type: ignore[attr-defined]


def test_every_option_the_docs_give_a_command_is_one_of_its_options() -> None:
    """An option renamed or removed leaves `run --every` in a page that a reader pastes."""
    commands = command_options()
    named = [(page.relative_to(ROOT), *found) for page in docs_pages()
             for found in options_named(page.read_text(), commands)]
    assert len(named) > 80  # the pattern still finds them
    wrong = [(str(page), command, option) for page, command, option, _ in named
             if option not in commands[command] | {"--help"}]
    assert wrong == [], wrong


def visible_options() -> list[tuple[str, str]]:
    """(command, option) of every option `gitscale COMMAND --help` shows."""
    import click

    from gitscale.cli import cli

    return sorted((name, opt) for name, command in cli.commands.items()  # type: ignore[attr-defined]
                  for param in command.params
                  if isinstance(param, click.Option) and not param.hidden
                  for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--"))


def test_every_option_help_shows_is_named_in_the_docs() -> None:
    """An option added to a command and to nothing a reader opens is an option nobody finds:
    each one `--help` shows is named in a page (with its command in a code span, or as
    `--option` in the prose of its section)."""
    text = "\n".join(page.read_text() for page in docs_pages())
    options = visible_options()
    assert len(options) > 80  # every command's options are found
    unnamed = [(command, option) for command, option in options
               if not re.search(rf"`[^`\n]*(?<![\w-]){re.escape(option)}(?![\w-])[^`\n]*`", text)]
    assert unnamed == [], unnamed


def test_the_named_check_tells_a_word_from_an_option() -> None:
    """`--baselines` inside `--no-baselines` is not a mention of it, nor is prose outside code."""
    pattern = rf"`[^`\n]*(?<![\w-]){re.escape('--baselines')}(?![\w-])[^`\n]*`"
    assert not re.search(pattern, "`--no-baselines` and --baselines in prose")
    assert re.search(pattern, "`simulate --baselines`")


def test_the_option_check_catches_an_option_of_another_command() -> None:
    commands = command_options()
    assert options_named("`gitscale plan --no-push`, `reconcile --no-push`", commands) == [
        ("plan", "--no-push", "gitscale plan --no-push"),
        ("reconcile", "--no-push", "reconcile --no-push")]
    assert "--no-push" not in commands["plan"] and "--no-push" in commands["reconcile"]


def test_the_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    """README "60-second quickstart", pasted at the top of a clone, with only its folders
    moved under tmp_path. `bash scripts/demo` is `.venv/bin/gitscale demo`, run through the
    interpreter's own gitscale so that the test never builds a .venv."""
    script = block_after((ROOT / "README.md").read_text(), "## 60-second quickstart")
    assert script.startswith("bash scripts/demo --dir /tmp/gs ")
    assert 'export PATH="$PWD/.venv/bin:$PATH"' in script
    script = (script.replace("bash scripts/demo", "gitscale demo")
              .replace("$PWD/.venv/bin", str(Path(sys.executable).parent))
              .replace("/tmp/gs", str(tmp_path / "gs"))
              .replace("/tmp/what-if.yaml", str(tmp_path / "what-if.yaml")))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GITSCALE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(["bash", "-uo", "pipefail", "-c", script], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr  # the last line: history
    out = done.stdout
    assert "Plan: 2 to change" in out and '"format_version": 1' in out, out
    assert "demand 8 (queued 8, running 0)" in out, out  # the what-if on standard input
    assert "pushed to origin/main" in out, out  # the what-if, to the demo's remote
    rows = [line.split()[2:5] for line in out.splitlines() if "scale-up" in line]
    assert ["linux-x64", "5→20", "6"] in rows and ["gpu", "0→1", "1"] in rows, out


def test_the_readme_simulate_examples_run_as_written(tmp_path: Path) -> None:
    """The "What a policy costs" lines that need no config repo, in an empty folder."""
    block = block_after((ROOT / "README.md").read_text(), "### What a policy costs")
    lines = [line.split("  #")[0].strip() for line in block.splitlines()
             if "--repo" not in line]
    assert len(lines) == 2 and all(line.startswith("gitscale simulate ") for line in lines)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for line in lines:
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert done.returncode == 0, (line, done.stderr)
        assert "arc-listener" in done.stdout and "oracle" in done.stdout, done.stdout
