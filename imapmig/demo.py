"""
The face of C{python -m imapmig.demo}: the demo lives in
L{imapmig.commands.demo}.
"""

from imapmig.commands.demo import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
