"""Telling the GitOps engine that a push landed, so it syncs now instead of at its next poll.

``targets`` reads the ``notify:`` list of gitscale.yaml, ``payloads`` builds the exact request
each engine verifies (pure: values in, bytes and headers out), and ``send`` posts them after a
push. A notification is best effort: a failure is one log line, never a failed pass, and the
engine's own poll still applies.
"""
