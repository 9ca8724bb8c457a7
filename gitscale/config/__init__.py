"""What people write: gitscale.yaml, presets, demand source settings, secrets, notify targets, and their schemas."""

DEFAULT_CONFIG = "gitscale.yaml"  # the config file at the repo's root (every command's --config)
