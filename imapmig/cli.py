"""
The face of C{imapmig} (C{imapmig.cli:main}, C{python -m imapmig.cli}): the
commands live in L{imapmig.commands.cli}.
"""

from imapmig.commands.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
