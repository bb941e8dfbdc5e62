"""The IMAP protocol layer: client adapter, APPEND pipeline, session facade."""
