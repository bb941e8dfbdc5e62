# -*- test-case-name: tests.test_startsignals -*-
"""
SIGINT and SIGTERM held while the daemon's services start.

Both launchers (C{twistd}, C{imapmig-daemon}) start the services before the
reactor runs, and the reactor installs its signal handlers only when it
runs.  A SIGINT that came in between was Python's C{KeyboardInterrupt},
raised in whatever ran then: inside a job's first Deferred it was caught
as that job's failure (the job ended without a line, the daemon ran on
and ignored the signal); a SIGTERM killed the process at once.  Held, the
signal is raised again once the reactor runs, where its own handler
stops the daemon as it stops it for any signal.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Any, Callable, Iterator

__all__ = ["HELD_SIGNALS", "heldSignals"]

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""
The signals held: those the reactor stops on.
"""


@contextmanager
def heldSignals(received: Callable[[int], None]) -> Iterator[None]:
    """
    While the block runs, hold L{HELD_SIGNALS}: the first of each that
    comes is not acted on, and is handed to C{received} when the block
    ends, after the handlers before it are back.  A signal ignored
    (C{SIG_IGN}, as in a shell's background job) stays ignored; off the
    main thread, where handlers cannot be set, nothing is held.

    @param received: called with each signal number held, once.
    """
    held: list[int] = []

    def hold(number: int, frame: Any) -> None:
        if number not in held:
            held.append(number)

    previous = _handleWith(hold)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in held:
            received(number)


def _handleWith(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """
    Handle each of L{HELD_SIGNALS} not ignored with C{handler}.

    @return: the handlers before, by signal number (none off the main
        thread, where nothing can be set).
    """
    previous: dict[int, Any] = {}
    try:
        for each in HELD_SIGNALS:
            if signal.getsignal(each) is not signal.SIG_IGN:
                previous[each] = signal.signal(each, handler)
    except ValueError:
        # Not the main thread: nothing was set.
        pass
    return previous
