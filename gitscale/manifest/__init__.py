"""Managed manifests: find the target object, read its owned fields, edit them in place."""
