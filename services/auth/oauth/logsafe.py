"""A logging filter for every logger of the authorization server that writes client input:
control, line-separator and bidi characters in the message arguments are escaped, so a
``client_name``, username or form field can never start a forged log line."""

from __future__ import annotations

import logging

from services.auth.domain.oauth import log_safe


class LogSafeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(log_safe(a, 2000) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: log_safe(v, 2000) if isinstance(v, str) else v for k, v in record.args.items()}
        if isinstance(record.msg, str) and not record.args:
            record.msg = log_safe(record.msg, 4000)
        return True
