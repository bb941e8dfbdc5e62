# The C extension imapmig/mail/_octets.c, built where a compiler is:
# imapmig.mail.octets.crlfAndFactsPython is the same function, documented.

def crlfAndFacts(data: bytes, afterCR: bool = False, last: bool = True, /) -> tuple[bytes, int]: ...
def crlfAndFactsBaseline(data: bytes, afterCR: bool = False, last: bool = True, /) -> tuple[bytes, int]: ...

AVX2: int
