"""What `--help` says: examples that parse, what --branch means for each command, and every
environment variable gitscale reads."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gitscale.cli import cli
from gitscale.commands.helptext import COMMANDS, ENVIRONMENT, TOP_EXAMPLES

PACKAGE = Path(__file__).resolve().parents[2] / "gitscale"
NAMES = sorted(cli.commands)  # type: ignore[attr-defined]

# How the package reads a variable: os.environ.get("X"), os.environ["X"], os.getenv("X"), and
# the default {env: X} of a credential (SecretRef("env", "X")).
READS = [
    re.compile(r"""os\.environ(?:\.get)?\s*[\[(]\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""),
    re.compile(r"""getenv\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""),
    re.compile(r"""SecretRef\(\s*["']env["']\s*,\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""),
]


def help_text(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def variables_read() -> set[str]:
    """Every variable named by a string literal the package reads, and the defaults of the
    options that name a variable (``serve --secret-env``)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for pattern in READS:
            found.update(pattern.findall(text))
    found.update(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", _askpass_script()))
    for command in cli.commands.values():  # type: ignore[attr-defined]
        for param in command.params:
            if param.name and param.name.endswith("_env") and isinstance(param.default, str):
                found.add(param.default)
    return found


def _askpass_script() -> str:
    from gitscale.repo import git_env

    return git_env._ASKPASS_SCRIPT


def test_the_commands_have_help_entries_and_the_entries_have_commands() -> None:
    assert set(COMMANDS) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_commands_help_has_examples_of_that_command(name: str) -> None:
    text = help_text(name)
    examples = text[text.index("Examples:"):]
    lines = [line.strip() for line in examples.splitlines()]
    assert any(line.startswith(f"gitscale {name}") for line in lines), text
    for example in COMMANDS[name][0]:
        assert f"    {example}\n" in text  # a line of its own, as written (not re-wrapped)


@pytest.mark.parametrize("name", NAMES)
def test_every_option_says_what_it_is_for(name: str) -> None:
    """An option listed with no words (simulate's --config and --seed were) leaves a new user
    guessing which file, relative to what, or what a seed changes."""
    command = cli.commands[name]  # type: ignore[attr-defined]
    silent = [param.opts[0] for param in command.params
              if isinstance(param, click.Option) and not param.hidden and not param.help]
    assert silent == [], f"gitscale {name}: options without help: {silent}"


@pytest.mark.parametrize("example", [
    pytest.param(example, id=example)
    for examples, _ in COMMANDS.values() for example in examples] + [
    pytest.param(example, id=f"top: {example}") for example in TOP_EXAMPLES])
def test_every_example_parses(example: str) -> None:
    """Each example is a command line click accepts: options that exist, values of their type,
    required arguments given (parsed only, never run)."""
    words = shlex.split(example.split(" > ")[0])
    assert words[0] == "gitscale"
    if words[1] == "COMMAND":
        return
    command = cli.commands[words[1]]  # type: ignore[attr-defined]
    with command.make_context(words[1], words[2:]) as ctx:
        assert isinstance(ctx, click.Context)


def test_the_top_level_help_has_examples_and_every_variable() -> None:
    text = help_text()
    assert "Examples:" in text and "Environment:" in text
    for name in ENVIRONMENT:
        assert f"\n    {name}\n" in text


@pytest.mark.parametrize("name", NAMES)
def test_each_command_names_the_variables_it_reads(name: str) -> None:
    text = help_text(name)
    for variable in COMMANDS[name][1]:
        assert f"\n    {variable}\n" in text
        assert ENVIRONMENT[variable].split()[0] in text


def test_every_variable_the_package_reads_is_in_some_help() -> None:
    read = variables_read()
    # the search finds them (a pattern that stopped matching would pass everything)
    assert {"GITSCALE_GIT_TOKEN", "GITSCALE_GIT_TOKEN_FILE", "GITSCALE_GIT_USERNAME",
            "GITSCALE_CACHE_DIR", "GITSCALE_AUTHOR", "GITHUB_TOKEN", "BUILDKITE_AGENT_TOKEN",
            "GITHUB_WEBHOOK_SECRET", "KUBECONFIG", "POD_NAMESPACE"} <= read
    helps = "\n".join([help_text(), *(help_text(name) for name in NAMES)])
    missing = sorted(name for name in read if not re.search(rf"\b{name}\b", helps))
    assert missing == [], f"read by gitscale, named in no --help: {missing}"


@pytest.mark.parametrize(("name", "says", "never"), [
    ("plan", "Branch to read", "commit"),
    ("validate", "Branch to read", "commit"),
    ("history", "Branch whose scaling commits to read", "commit to"),
    ("simulate", "Branch whose scaling commits --from-history reads", "commit to"),
    ("reconcile", "Branch to read and commit to", None),
    ("run", "Branch to read and commit to", None),
    ("serve", "Branch to read and commit to", None),
    ("drain", "Branch to read and commit to", None),
    ("init", "Branch of the new repo", None),
])
def test_branch_says_what_the_command_does_with_it(name: str, says: str,
                                                   never: str | None) -> None:
    command = cli.commands[name]  # type: ignore[attr-defined]
    (branch,) = [p for p in command.params if p.name == "branch"]
    assert isinstance(branch, click.Option) and branch.help is not None
    assert branch.help.startswith(says)
    if never is not None:
        assert never not in branch.help


@pytest.mark.parametrize("name", ["plan", "validate", "history", "reconcile", "run", "serve",
                                  "drain"])
def test_branch_says_a_checkout_works_on_its_checked_out_branch(name: str) -> None:
    """It said "default: the remote's default branch; a checkout must be on it": a checkout
    on a feature branch (--repo's default, .) reads and commits to that branch
    (tests/commands/test_reconcile.py), and --branch may only repeat it."""
    command = cli.commands[name]  # type: ignore[attr-defined]
    (branch,) = [p for p in command.params if p.name == "branch"]
    assert isinstance(branch, click.Option) and branch.help is not None
    assert "in a checkout, the one checked out, which --branch may only repeat" in branch.help
    assert "a checkout must be on it" not in branch.help


def test_the_readme_names_every_variable() -> None:
    readme = (PACKAGE.parent / "README.md").read_text()
    table = readme[readme.index("**Help.**"):readme.index("**Shell completion**")]
    for name in ENVIRONMENT:
        assert f"`{name}`" in table, name
