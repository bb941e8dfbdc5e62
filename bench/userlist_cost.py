"""
Measure what a 10,000-row user list costs to load: writes a configuration
with a template and a CSV of N rows (IMAP source with a credential, a
destination password file per row, each its own file) in a temporary directory, then times
loadConfig and reports the process's peak RSS.

    .venv/bin/python -m bench.userlist_cost [ROWS] [--credentials-only]

With --credentials-only the destination uses the credential too (no
per-row password file).
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time

import yaml


def main(rows: int, perRowFiles: bool) -> None:
    """
    Write the files, load them, print the numbers.
    """
    directory = tempfile.mkdtemp()
    def secret(name: str) -> str:
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write("pw\n")
        os.chmod(path, 0o600)
        return path
    admin = secret("admin.pw")
    passwords = os.path.join(directory, "pw")
    os.mkdir(passwords)
    for index in range(rows if perRowFiles else 0):
        secret(os.path.join("pw", f"u{index}.pw"))
    with open(os.path.join(directory, "users.csv"), "w") as f:
        last = "destination_password_file" if perRowFiles else "destination_credential"
        f.write(f"source_user,destination_user,source_credential,{last}\n")
        for index in range(rows):
            password = f"pw/u{index}.pw" if perRowFiles else "admin"
            f.write(f"u{index},u{index}@example.org,admin,{password}\n")
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "servers": {
            "old": {"endpoint": "tcp:old.example.org:143"},
            "new": {"endpoint": "tcp:new.example.org:143"},
        },
        "credentials": {"admin": {"user": "root", "password_file": admin}},
        "jobs": [
            {
                "name": "users",
                "jobs_from": "users.csv",
                "source": {"server": "old"},
                "destination": {"server": "new"},
            }
        ],
    }
    configPath = os.path.join(directory, "imapmig.yaml")
    with open(configPath, "w") as f:
        yaml.safe_dump(document, f)
    from imapmig.config import loadConfig

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    config = loadConfig(configPath)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"{len(config.jobs)} jobs: loadConfig {elapsed:.3f} s;"
        f" peak RSS {peak / 1024:.1f} MB ({before / 1024:.1f} MB before loading,"
        " imports done)"
    )
    shutil.rmtree(directory)


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 10_000,
        "--credentials-only" not in sys.argv,
    )
