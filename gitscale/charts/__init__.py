"""Charts of replicas and demand over time (matplotlib, imported only to draw)."""
