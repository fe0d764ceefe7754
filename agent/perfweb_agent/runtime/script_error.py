"""The script's last error line, for a run that dies of an uncaught exception.

`sys.excepthook` is wrapped, never replaced in effect: the wrapper notes the exception's
last line (`ModuleNotFoundError: No module named 'x'`) as the fact `run.error`, then hands
the exception to the hook that was there before, which prints the traceback exactly as it
would have. The agent's exit handler runs after it and sends the fact with the last batch.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from types import TracebackType

ERROR_FACT = "run.error"
ERROR_CHARS = 300  # the line, at most
MARK = "__perf_agent_excepthook__"


def error_line(kind: type[BaseException], value: BaseException | None) -> str:
    """The exception as Python's traceback ends: `Kind: message`, on one line."""
    lines = traceback.format_exception_only(kind, value)
    text = lines[-1].strip() if lines else kind.__name__
    return " ".join(text.split())[:ERROR_CHARS]


def install(record: Callable[[str, str], None]) -> None:
    """Wrap the current `sys.excepthook` so that an uncaught exception is recorded with
    `record(ERROR_FACT, line)` before the previous hook prints it. Installing twice is a no-op."""
    previous = sys.excepthook
    if getattr(previous, MARK, False):
        return

    def excepthook(
        kind: type[BaseException], value: BaseException, trace: TracebackType | None
    ) -> None:
        try:  # noqa: SIM105 - the agent never raises into the script
            record(ERROR_FACT, error_line(kind, value))
        except Exception:  # noqa: BLE001, S110
            pass
        previous(kind, value, trace)

    setattr(excepthook, MARK, True)
    sys.excepthook = excepthook
