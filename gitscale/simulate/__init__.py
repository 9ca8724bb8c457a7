"""`gitscale simulate`: replay job traces through the real decision and controller rules.

``trace`` reads or generates jobs, ``model`` is the cluster (runner pods doing one job each,
driven by the controller's pure ``decide``), ``strategies`` are gitscale and the baselines it is
measured against, ``report`` turns a run into metrics.
"""
