"""
imapmig: an asynchronous IMAP migration daemon.

Messages flow one way: configuration -> job queue -> source -> APPEND
pipeline -> destination, with the state store recording every outcome and
the status resource reading a view of the progress.
"""

__version__ = "0.1.0"
