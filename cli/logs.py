"""Logging for the command line: the client libraries' retry chatter is debug output.

During an Elasticsearch outage ``elastic_transport`` logs each failed attempt as a WARNING with a full
traceback before hopsearch prints its own one-line message. Those records are demoted to DEBUG here, so
they show only under ``-vv``.
"""

from __future__ import annotations

import logging

#: Loggers whose records below ERROR are demoted to DEBUG (they repeat what hopsearch reports itself).
LIBRARY_LOGGERS = ("elastic_transport", "elasticsearch", "urllib3")
FORMAT = "%(levelname)s %(name)s: %(message)s"


class DemoteLibraries(logging.Filter):
    """A handler filter: library records below ERROR become DEBUG records, shown only at DEBUG."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR or not record.name.startswith(LIBRARY_LOGGERS):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return self.level <= logging.DEBUG


def configure(verbosity: int) -> None:
    """0: warnings; 1 (``-v``): info; 2 (``-vv``): debug, the libraries' retry tracebacks included."""
    level = (logging.WARNING, logging.INFO)[verbosity] if verbosity < 2 else logging.DEBUG
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(DemoteLibraries(level))
    logging.basicConfig(level=level, handlers=[handler])
