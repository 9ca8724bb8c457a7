"""A local, Kubernetes-shaped API server for tests and benchmarks; see server.py."""
