"""
The build's one part setup.cfg cannot say: the C extension
imapmig.mail._octets (imapmig/mail/_octets.c, the one pass over a message's
octets).  It is optional: without a C compiler or Python's headers the
build goes on without it, and imapmig.mail.octets uses its Python twin
(docs/install.md says what the compiler buys).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "imapmig.mail._octets",
            sources=["imapmig/mail/_octets.c"],
            optional=True,
        )
    ]
)
