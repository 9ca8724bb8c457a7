"""`gitscale controller`: RunnerSets in, ephemeral runner pods out (PRODUCT §4).

The flow, one module per step:
  cache.py (list+watch stores) → observe.py (raw objects → values) → decide.py (pure: what to
  create, delete and report) → reconcile.py (apply it: kube.py, platforms.py with github.py /
  buildkite.py, podspec.py) → status.py (counts and conditions). loop.py runs it: informers,
  a work queue (workqueue.py), workers, a periodic resync and /healthz /readyz.
Only kube.py imports the ``kubernetes`` client; errors.py holds the controller's error types.
"""
