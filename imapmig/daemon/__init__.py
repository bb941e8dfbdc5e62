# -*- test-case-name: tests.test_tap, tests.test_listenreason -*-
"""
The daemon: the twistd plugin's options and service (L{imapmig.daemon.tap}),
the launcher without twistd (L{imapmig.daemon.main}, C{imapmig-daemon} and
C{python -m imapmig.daemon}), the service tree's assembly, the root service,
listeners, sd_notify and reload.
"""

from imapmig.errors import StatusListenerFailed

__all__ = ["StatusListenerFailed", "run"]


def run() -> None:
    """
    The C{imapmig-daemon} console script: L{imapmig.daemon.main.run},
    imported when called so that importing a module of this package
    (C{imapmig.daemon.tap} for twistd) does not import the launcher.
    """
    from imapmig.daemon.main import run as _run

    _run()
