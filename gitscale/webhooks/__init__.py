"""Webhook mode: deliveries, reservations, batches and the resync poll."""
