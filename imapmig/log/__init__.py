"""
Log output: event fields, levels, JSON lines and the journal.
"""
