"""What people write: gitscale.yaml, presets, demand source settings, secrets, notify targets, and their schemas."""
