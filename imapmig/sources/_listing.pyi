# The C extension imapmig/sources/_listing.c, built where a compiler is:
# imapmig.sources.local.sizeAndMtimePython is the same function, documented.

def sizeAndMtime(dirFd: int, name: str, /) -> tuple[int, float] | None: ...
