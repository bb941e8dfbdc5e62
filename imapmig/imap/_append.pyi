# The C extension imapmig/imap/_append.c, built where a compiler is:
# imapmig.imap.pipeline.appendLiteralsPython is the same function, documented.

from imapmig.imap.gather import Piece
from imapmig.imap.outgoing import OutgoingMessage

def bindOutgoing(cls: type[OutgoingMessage], /) -> None: ...
def appendLiterals(
    messages: list[OutgoingMessage], start: int, limit: int, budget: int, out: list[Piece], /
) -> tuple[int, bool]: ...
