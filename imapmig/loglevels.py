"""
The face of C{twistd --logger=imapmig.loglevels.twistdLogObserver}, the name
admins give twistd on their command lines and units: the observer lives in
L{imapmig.log.loglevels}.
"""

from imapmig.log.loglevels import twistdLogObserver

__all__ = ["twistdLogObserver"]
