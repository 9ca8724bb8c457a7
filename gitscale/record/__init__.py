"""The record: the scaling commit's format and its parser."""
