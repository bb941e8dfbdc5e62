"""
The twistd plugin: C{twistd -n imapmig --config FILE}.
"""

from twisted.application.service import ServiceMaker

imapmig = ServiceMaker(
    "imapmig",
    "imapmig.tap",
    "Migrate mail into IMAP accounts with pipelined APPENDs",
    "imapmig",
)
