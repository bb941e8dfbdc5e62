"""
C{python -m imapmig.daemon}: the launcher, L{imapmig.daemon.main}.
"""

from imapmig.daemon.main import run

if __name__ == "__main__":
    run()
