"""
The face the twistd plugin names (C{twisted/plugins/imapmig_plugin.py},
C{imapmig.tap}): the options and the service live in L{imapmig.daemon.tap}.
"""

from imapmig.daemon.tap import Options, makeService

__all__ = ["Options", "makeService"]
