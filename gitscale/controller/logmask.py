"""The controller's log lines masked (``gitscale.redact``) in the record itself, tracebacks
included, and written as JSON objects when ``GITSCALE_LOG_FORMAT=json`` (``JsonFormatter``).
Apart from ``redact``: only the controller logs through ``logging``, and a CLI pass should not
import it (``tests/test_cli_imports.py``)."""
from __future__ import annotations

import logging
from datetime import datetime, timezone

from gitscale.logline import Level, json_line
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


class JsonFormatter(logging.Formatter):
    """``GITSCALE_LOG_FORMAT=json``: a record as one JSON object on one line
    (``logline.json_line``), its traceback or stack kept in ``msg``; the level from the
    record's (WARNING: "warning", ERROR and above: "error", below: "info"), and the logger's
    name in ``logger``. Masked again by ``json_line``: this formatter masks on its own, without
    ``MASK_LOG``."""

    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for more in (record.exc_text, record.stack_info):
            if more:
                message = f"{message}\n{more}"
        level: Level = ("error" if record.levelno >= logging.ERROR else
                 "warning" if record.levelno >= logging.WARNING else "info")
        return json_line(datetime.fromtimestamp(record.created, timezone.utc), level,
                         self.component, message, logger=record.name)
