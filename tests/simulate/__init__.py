"""Tests of `gitscale simulate`: traces, the cluster model, the strategies, the CLI."""
