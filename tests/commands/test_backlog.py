"""`gitscale reconcile` under saturation: a RunnerSet's write carries ``spec.backlog``, the next
write comes only once its refills are used up, and a Deployment never gets the field."""
from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}  # runners of a RunnerDeployment-like setup
  template:
    spec:
      containers:
      - {{name: c, image: "x:1"}}
"""
POLICY = "{minReplicas: 0, maxReplicas: 3, scaleDownDelay: 5m}"


def reconcile(tmp_path: Path, capsys, checkout: Path, clock: str,  # type: ignore[no-untyped-def]
              jobs: dict[str, tuple[int, list[int]]]) -> None:
    """One pass with this demand: per set, (queued, the ids of queued and running jobs)."""
    jobs = {"web": (6, list(range(1, 7)))} | jobs  # the Deployment's demand stays the same
    demand = tmp_path / "what-if.yaml"
    demand.write_text("".join(f"{name}: {{queued: {queued}, running: {len(ids) - queued}, "
                              f"jobs: {ids}}}\n" for name, (queued, ids) in jobs.items()))
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                       "--now", f"2026-11-23T{clock}Z")
    assert code == 0, err


def spec(remote: Path, name: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(git(remote, "show", f"main:sets/{name}.yaml"))["spec"]  # type: ignore[no-any-return]


def test_a_saturated_runnerset_gets_its_backlog_and_a_deployment_none(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": POLICY, "web": POLICY}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/web.yaml": DEPLOYMENT.format(name="web", replicas=0),
        "demand.yaml": "linux: {queued: 0, running: 0}\nweb: {queued: 0, running: 0}\n",
    })
    remote = tmp_path / "remote.git"
    six = list(range(1, 7))  # 3 will run, 3 wait beyond the 3 runners
    reconcile(tmp_path, capsys, checkout, "09:00:00", {"linux": (6, six)})
    linux, web = spec(remote, "linux"), spec(remote, "web")
    assert (linux["replicas"], linux["patchID"], linux["backlog"]) == (3, 0, 3)
    assert web["replicas"] == 3 and "backlog" not in web and "patchID" not in web
    body = git(remote, "log", "-1", "--format=%B", "main")
    assert "backlog 3: the controller refills up to 3 finished slot(s)" in body
    commits = git(remote, "rev-list", "--count", "main")

    # job 1 completed, job 7 came: the backlog still covers it, and refills are left
    reconcile(tmp_path, capsys, checkout, "09:01:00", {"linux": (3, list(range(2, 8)))})
    assert git(remote, "rev-list", "--count", "main") == commits

    # jobs 1-4 completed (the three refills used up), 7 and 8 came and wait beyond them
    reconcile(tmp_path, capsys, checkout, "09:02:00", {"linux": (1, list(range(5, 9)))})
    linux = spec(remote, "linux")
    assert (linux["replicas"], linux["patchID"], linux["backlog"]) == (3, 1, 1)
    assert (checkout / "sets/linux.yaml").read_text().count("backlog:") == 1

    # the queue drained: the backlog goes back to 0 with the scale-down
    reconcile(tmp_path, capsys, checkout, "09:08:00", {"linux": (0, [8])})
    linux = spec(remote, "linux")
    assert (linux["replicas"], linux["patchID"], linux["backlog"]) == (1, 2, 0)
    code, out, err = run(capsys, "validate", "--repo", str(checkout))
    assert code == 0, out + err


def test_plan_json_shows_the_backlog_a_write_sets(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`plan --output json` gives a RunnerSet's backlog in ``from``/``to`` (a script watching
    saturation reads it there, not from the patch); a kind without one says null."""
    import json

    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": POLICY, "web": POLICY}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/web.yaml": DEPLOYMENT.format(name="web", replicas=0),
        "demand.yaml": "linux: {queued: 6, running: 0}\nweb: {queued: 6, running: 0}\n",
    })
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now",
                         "2026-11-23T09:00:00Z", "--output", "json")
    assert code == 2, err
    by_set = {c["set"]: c for c in json.loads(out)["changes"]}
    assert (by_set["linux"]["from"]["backlog"], by_set["linux"]["to"]["backlog"]) == (0, 3)
    assert (by_set["web"]["from"]["backlog"], by_set["web"]["to"]["backlog"]) == (None, None)
