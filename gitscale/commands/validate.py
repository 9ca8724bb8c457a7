"""`gitscale validate`: every manifest gitscale manages, against its schema."""
from __future__ import annotations

import click

from gitscale.commands import EXIT_ERROR, EXIT_OK, RepoOptions
from gitscale.config import load_config
from gitscale.manifest.files import read_manifest
from gitscale.manifest.target import read_target
from gitscale.validate import SchemaValidator, crds_in_repo, kubeconform_path, run_kubeconform
from gitscale.workspace import open_workspace


def run_validate(opts: RepoOptions) -> int:
    problems: list[str] = []
    checked = skipped = 0
    with open_workspace(opts.repo, opts.branch) as ws:
        config = load_config(ws.root, opts.config)
        validator = SchemaValidator(crds_in_repo(ws.root, ws.git.out("ls-files").splitlines()))
        binary = kubeconform_path()
        seen_files: set[str] = set()
        for runner_set in config.sets:
            text = read_manifest(ws.root, runner_set, config.path)
            target = read_target(runner_set.manifest, text, runner_set.object)
            if binary is not None:
                if runner_set.manifest not in seen_files:
                    seen_files.add(runner_set.manifest)
                    problems += [f"{runner_set.manifest}: {p}"
                                 for p in run_kubeconform(binary, text, validator)]
                checked += 1
            elif validator.knows(target.obj):
                problems += [f"{runner_set.manifest}: {p}" for p in validator.check(target.obj)]
                checked += 1
            else:
                skipped += 1
                click.echo(f"skipped {runner_set.name}: no schema for {target.obj.get('apiVersion')}"
                           f" {target.kind} (install kubeconform to check built-in kinds)")
    how = "kubeconform" if binary else "in-process JSON Schema"
    for problem in problems:
        click.echo(f"invalid: {problem}", err=True)
    click.echo(f"{checked} checked with {how}, {skipped} skipped, {len(problems)} problems")
    return EXIT_ERROR if problems else EXIT_OK
