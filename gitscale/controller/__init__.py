"""`gitscale controller`: RunnerSets in, ephemeral runner pods out.

The flow, one module per step:
  cache.py (list+watch stores) → observe.py (raw objects → values) → decide.py (pure: what to
  create, delete and report, behind the patch-ID gate) → reconcile.py (apply it: create.py
  makes runners, remove.py removes them, leftovers.py what a crash left, registered.py reads
  the platform's list, runnerset_writes.py the finalizer and status; context.py; kube.py,
  podspec.py) → status.py (counts, the last write applied, kstatus conditions). Everything platform-specific comes
  from the registry, platforms.py: one entry (platform.py's ``Kind``) per platform, defined in
  platform_github.py / platform_buildkite.py, whose API clients are github.py / buildkite.py.
  loop.py runs it: informers, a work queue (workqueue.py), workers, a periodic resync,
  /healthz /readyz, and leader election (leader.py). memory.py keeps what passes learn.
Only kube.py (its verbs), kube_config.py (the kubeconfig) and kube_answers.py (the answers,
the client's errors) import the ``kubernetes`` client; errors.py holds the controller's error
types.
"""
