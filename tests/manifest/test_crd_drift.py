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


HEAD = ("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: runnersets.gitscale.dev}\n")


@pytest.mark.parametrize(("schema", "why"), [
    pytest.param("&a {type: object, properties: {spec: *a}}",
                 "spec.versions[0].schema.openAPIV3Schema.properties.spec holds itself: a "
                 "recursive YAML anchor", id="properties"),
    pytest.param("&a {type: array, items: *a}",
                 "spec.versions[0].schema.openAPIV3Schema.items holds itself: a recursive YAML "
                 "anchor", id="items"),
    pytest.param("{properties: {spec: &b {properties: {more: {items: *b}}}}}",
                 "spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.more.items "
                 "holds itself: a recursive YAML anchor", id="deeper"),
])
def test_a_schema_that_holds_itself_is_said_not_raised(schema: str, why: str) -> None:
    """A recursive anchor was a RecursionError out of ``_walk`` (exit 70, after reconcile had
    pushed)."""
    text = HEAD + f"spec:\n  versions:\n  - name: v1alpha1\n    schema:\n" \
                  f"      openAPIV3Schema: {schema}\n"
    assert drift("crd.yaml", text) == (
        f"crd.yaml: a RunnerSet CRD gitscale cannot compare with its own ({why}): run "
        "`gitscale crd --repo .` and apply it before this version writes")


def test_a_schema_used_twice_is_not_a_cycle() -> None:
    """An anchor used at two places (not inside itself) is compared as written out."""
    text = HEAD + ("spec:\n  versions:\n  - name: v1alpha1\n    schema:\n      openAPIV3Schema:\n"
                   "        properties:\n          spec: &s {properties: {replicas: {}}}\n"
                   "          status: *s\n")
    warning = drift("crd.yaml", text)
    assert warning is not None and warning.startswith("crd.yaml: older than"), warning


def test_schemas_nested_past_the_bound_are_said() -> None:
    schema = "{}"
    for _ in range(150):
        schema = f"{{properties: {{x: {schema}}}}}"
    text = HEAD + f"spec: {{versions: [{{name: v1, schema: {{openAPIV3Schema: {schema}}}}}]}}\n"
    warning = drift("crd.yaml", text)
    assert warning is not None and "schemas nested more than 100 levels deep" in warning, warning


@pytest.mark.parametrize(("text", "why"), [
    pytest.param(HEAD + "spec: [\n", "line 5: not valid YAML: ", id="not-yaml"),
    pytest.param("spec: [\n", "line 2: not valid YAML: ", id="not-yaml-no-name"),
    pytest.param(HEAD + "spec: " + "[" * 1001 + "]" * 1001 + "\n",
                 "line 4: nested more than 1000 levels deep", id="too-deep"),
])
def test_a_file_named_after_the_crd_that_is_not_yaml_is_said(text: str, why: str) -> None:
    """It passed `validate` without a word (a bare ``except Exception``)."""
    for path in ("deploy/crds/runnersets.gitscale.dev.yaml", "prod/gitscale-system/crd.yaml"):
        warning = drift(path, text)
        assert warning is not None and warning.startswith(
            f"{path}: a RunnerSet CRD gitscale cannot compare with its own ({why}"), warning
    # a file not named after it may be anything: not this warning's business
    assert drift("apps/other.yaml", text) is None
