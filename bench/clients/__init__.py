"""
The benchmark's clients, each run as its own process by L{bench.run}: a
one-by-one L{imaplib} loop, Twisted's stock C{IMAP4Client}, and a STATUS
counter that verifies a run.  The compiled raw writer is C{bench/rawappend.c}.
"""
