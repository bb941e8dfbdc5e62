"""
The build's one part setup.cfg cannot say: the C extensions
imapmig.mail._octets (imapmig/mail/_octets.c and _crlf.c, the one pass
over a message's octets), imapmig.sources._listing
(imapmig/sources/_listing.c, a listed file's size and mtime),
imapmig.imap._literal (imapmig/imap/_literal.c, a FETCH literal read into
its final bytes), imapmig.imap._append (imapmig/imap/_append.c, the
send side's per-message loops: APPEND literals, sendmsg) and
imapmig.job._sent (imapmig/job/_sent.c, the job's loops over the messages
it sends: their preparation, their outcomes' columns); the last two share
imapmig/_slots.h.  They are optional: without a C compiler or Python's
headers the build goes on without them, and imapmig.mail.octets,
imapmig.sources.local, imapmig.imap.literal, imapmig.imap.pipeline,
imapmig.imap.sendqueue, imapmig.job.preparation and imapmig.job.recording
use their Python twins
(docs/install.md says what the compiler buys).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "imapmig.mail._octets",
            sources=["imapmig/mail/_octets.c", "imapmig/mail/_crlf.c"],
            depends=["imapmig/_fsname.h", "imapmig/mail/_crlf.h"],
            optional=True,
        ),
        Extension(
            "imapmig.sources._listing",
            sources=["imapmig/sources/_listing.c"],
            optional=True,
        ),
        Extension(
            "imapmig.imap._literal",
            sources=["imapmig/imap/_literal.c"],
            optional=True,
        ),
        Extension(
            "imapmig.imap._append",
            sources=["imapmig/imap/_append.c"],
            depends=["imapmig/_slots.h"],
            optional=True,
        ),
        Extension(
            "imapmig.job._sent",
            sources=["imapmig/job/_sent.c"],
            depends=["imapmig/_slots.h"],
            optional=True,
        ),
    ]
)
