"""Where `reconcile` looks for the repo's RunnerSet CRD (``where_the_crd_is``), and what
``drift`` makes of a CRD it cannot read."""
from __future__ import annotations

import pytest

from gitscale.manifest.crd_drift import drift, where_the_crd_is


@pytest.mark.parametrize(("path", "found"), [
    pytest.param("deploy/crds/runnersets.gitscale.dev.yaml", "named", id="crd-repo-default"),
    pytest.param("runnersets.gitscale.dev.yml", "named", id="top-level-yml"),
    pytest.param("crds/gitscale-runnersets.gitscale.dev.crd.yaml", "named", id="name-contains"),
    pytest.param("clusters/prod/gitscale-system/crd.yaml", "named", id="init"),
    pytest.param("gitscale-system/crd.yaml", "named", id="init-at-top"),
    pytest.param("crds.yaml", "bundle", id="bundle-top"),
    pytest.param("infra/crds/cert-manager.crds.yaml", "bundle", id="cert-manager-bundle"),
    pytest.param("charts/x/templates/crds.yaml", "bundle", id="chart-bundle"),
    pytest.param("crossplane/crds/provider-aws.yaml", None, id="another-projects-crd"),
    pytest.param("apps/argo/crd.yaml", None, id="another-crd-yaml"),
    pytest.param("other-gitscale-system/crd.yaml", None, id="not-inits-folder"),
    pytest.param("deploy/crds/runnersets.gitscale.dev.json", None, id="not-yaml"),
])
def test_where_the_crd_is(path: str, found: str | None) -> None:
    named, bundles = where_the_crd_is([path])
    assert (named, bundles) == ([path] if found == "named" else [],
                                [path] if found == "bundle" else [])


@pytest.mark.parametrize("spec", [
    "versions: 5", "versions: [7]", "versions: [{name: v1, schema: broken}]",
    "versions: [{name: v1, schema: {openAPIV3Schema: [1]}}]", "versions: []",
])
def test_a_crd_it_cannot_read_is_said_not_raised(spec: str) -> None:
    text = ("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
            f"metadata: {{name: runnersets.gitscale.dev}}\nspec: {{{spec}}}\n")
    warning = drift("crd.yaml", text)
    assert warning is not None
    assert warning.startswith("crd.yaml: a RunnerSet CRD gitscale cannot compare with its own (")
