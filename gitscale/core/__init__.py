"""The pure decision core: values in, values out, the clock passed in.

Nothing in this package imports git, YAML, HTTP or Kubernetes code.
"""
