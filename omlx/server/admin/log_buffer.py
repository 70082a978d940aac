"""The server's recent log records, kept in memory for the admin's logs page.

A logging handler on the root logger; it sees what the configured level lets through
(prompt text only ever at DEBUG, the logging policy of the whole project). Records get
sequence numbers, so a following page asks only for what came after its last one.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque

from omlx.schemas.admin import LogRecord, LogTail
from omlx.server.request_log import RequestContextFilter

LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


class LogBuffer(logging.Handler):
    def __init__(self, capacity: int = 5000) -> None:
        super().__init__(level=logging.NOTSET)
        self._records: deque[LogRecord] = deque(maxlen=capacity)
        self._seq = itertools.count(1)
        self._guard = threading.Lock()
        self.addFilter(RequestContextFilter())  # request ids, as the console shows them

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                message += f"\n{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
            item = LogRecord(
                seq=0,
                time=record.created,
                level=record.levelname,
                logger=record.name,
                request_id=str(getattr(record, "request_id", "-")),
                message=message,
            )
        except Exception:
            self.handleError(record)
            return
        with self._guard:
            item.seq = next(self._seq)
            self._records.append(item)

    def tail(self, *, after: int = 0, level: str = "DEBUG", limit: int = 500) -> LogTail:
        """Records newer than `after` at `level` or above (the newest `limit` of them)."""
        floor = LEVELS.get(level.upper(), 10)
        with self._guard:
            records = [r for r in self._records if r.seq > after]
            last = self._records[-1].seq if self._records else 0
        picked = [r for r in records if LEVELS.get(r.level, 0) >= floor][-limit:]
        level_now = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        return LogTail(records=picked, last_seq=last, server_level=level_now)

    def attach(self) -> None:
        root = logging.getLogger()
        if self not in root.handlers:
            root.addHandler(self)

    def detach(self) -> None:
        logging.getLogger().removeHandler(self)
