"""The controller's log lines masked (``gitscale.redact``) in the record itself, tracebacks
included. Apart from ``redact``: only the controller logs through ``logging``, and a CLI pass
should not import it (``tests/test_cli_imports.py``)."""
from __future__ import annotations

import logging

from gitscale.redact import redact


class MaskingFilter(logging.Filter):
    """Masks a log record's message, traceback and stack (``redact``) in the record itself, so
    that every handler, whatever its format, gets it masked. On a logger, it sees the records
    logged there; on a handler, every record that reaches it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "gitscale_masked", False):  # by the logger's filter, then the handler's
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format: the handler reports it, as logging does
            return True
        record.msg, record.args = redact(message), None
        record.gitscale_masked = True
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.exc_info = None  # (a formatter would format it again, unmasked)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


MASK_LOG = MaskingFilter()  # one instance: adding it twice to a logger adds it once
