"""Log levels and plain log lines, for every process of a run (launcher, ServerApp, ClientApps).

:func:`configure_logging` applies ``--log-level`` (``PFEDMA_LOG_LEVEL``) to the project's
loggers in whichever process reads it; :func:`plain_log_line` is what ``run.log`` keeps of a
terminal line. Both sides use it, so it lives outside ``server/`` and ``client/``.
"""

from __future__ import annotations

import logging
import os
import re
import sys

#: the environment variable carrying ``--log-level`` from the launcher into the app processes
LOG_LEVEL_ENV = "PFEDMA_LOG_LEVEL"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: the project's logger roots (``logging.getLogger(__name__)`` in these packages)
PROJECT_LOGGERS = ("pfedma_flwr", "client_apps", "strategies")
# colour, cursor and hyperlink sequences of Flower's and rich's terminal output
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def plain_log_line(line: str) -> str:
    """``line`` as ``run.log`` keeps it: no ANSI codes, only what follows its last CR.

    A progress bar redraws itself with carriage returns; a terminal shows the text after the
    last one, and so does the log.
    """
    text = ANSI.sub("", line)
    end = "\n" if text.endswith("\n") else ""
    body = text[: len(text) - len(end)]
    if "\r" in body:
        body = body.rsplit("\r", 1)[1]
    return body + end


def parse_log_level(value: str | None, *, where: str = LOG_LEVEL_ENV) -> int:
    """A :data:`LOG_LEVELS` name (any case; empty or ``None``: INFO) as a ``logging`` level.

    Raises
    ------
    ValueError
        If ``value`` names no level; the message names ``where`` it came from.
    """
    name = (value or "INFO").strip().upper()
    if name not in LOG_LEVELS:
        raise ValueError(f"{where}: log level {value!r} is not one of {', '.join(LOG_LEVELS)}")
    return int(getattr(logging, name))


def configure_logging(level: str | int | None = None) -> int:
    """Set the project's loggers and Flower's console handler to ``level``; return it.

    ``None`` reads :data:`LOG_LEVEL_ENV` (the launcher sets it for every process of the run);
    a bad value there falls back to INFO with a warning rather than failing a node. Where the
    root logger has no handler (the app processes), the project's loggers get one stderr
    handler (once): without it their INFO lines went to Python's last-resort handler, which
    drops everything below WARNING.
    """
    if isinstance(level, int):
        lvl = level
    else:
        try:
            lvl = parse_log_level(level if level is not None else os.environ.get(LOG_LEVEL_ENV))
        except ValueError as e:
            lvl = logging.INFO
            logging.getLogger(__name__).warning("%s; using INFO", e)
    for name in PROJECT_LOGGERS:
        lg = logging.getLogger(name)
        lg.setLevel(lvl)
        if not logging.getLogger().handlers and not any(
            getattr(h, "_pfedma", False) for h in lg.handlers
        ):
            h = logging.StreamHandler(sys.stderr)
            h.setFormatter(logging.Formatter("%(levelname)-8s: %(name)s: %(message)s"))
            h._pfedma = True  # type: ignore[attr-defined]  # marks our handler: added once
            lg.addHandler(h)
    try:
        from flwr.common.logger import update_console_handler

        update_console_handler(level=lvl)
    except ImportError:  # Flower is a dependency; a bare analysis environment may lack it
        pass
    return lvl
