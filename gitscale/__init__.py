"""gitscale: scale self-hosted CI runners on Kubernetes through git commits."""

__version__ = "0.1.0"
