"""
The demo behind C{make demo}: a generated sample Maildir migrated into a
private local Dovecot by the real daemon (C{twistd -n imapmig}), with its
status page, then checked message by message.

    python -m imapmig.demo [--messages N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter

from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser

STATUS_PORT = 8025


def _freePort() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(url: str) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            result: dict[str, object] = json.load(response)
            return result
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    """
    Run the demo; return the process exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m imapmig.demo",
        description=(
            "The demo behind `make demo`: a generated sample Maildir migrated into a"
            " private local Dovecot by the real daemon (twistd -n imapmig), with its"
            " dashboard, then checked message by message."
        ),
    )
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--directory", default="demo")
    parser.add_argument(
        "--keep", action="store_true", help="keep the daemon serving status after the run"
    )
    args = parser.parse_args(argv)

    base = os.path.abspath(args.directory)
    if os.path.exists(base):
        subprocess.run(["rm", "-rf", base], check=True)
    os.makedirs(base)
    os.chmod(base, 0o755)
    print(f"== Generating a sample Maildir of {args.messages} messages in {base}/Maildir")
    corpus = writeMaildir(os.path.join(base, "Maildir"), args.messages)
    print(f"   folders: {', '.join('/'.join(f) for f in corpus.folders)}")

    dovecot = DovecotInstance(
        os.path.join(base, "dovecot"), users=(DovecotUser("demo", "demo-password"),)
    )
    dovecot.start()
    try:
        passwordFile = os.path.join(base, "demo.pw")
        with open(os.open(passwordFile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("demo-password\n")
        statusPort = STATUS_PORT if _portFree(STATUS_PORT) else _freePort()
        configPath = os.path.join(base, "imapmig.yaml")
        with open(configPath, "w") as f:
            f.write(
                f"""\
# Written by the demo: a private Dovecot on 127.0.0.1:{dovecot.port}.
state: {base}/state.sqlite
status:
  listen: "tcp:{statusPort}:interface=127.0.0.1"
servers:
  local:
    endpoint: "tcp:127.0.0.1:{dovecot.port}"
    starttls: required
    tls_ca: {dovecot.caCertificatePath}
    tls_hostname: localhost
jobs:
  - name: demo
    source: {{maildir: {base}/Maildir}}
    destination: {{server: local, user: demo, password_file: {passwordFile}}}
"""
            )
        url = f"http://127.0.0.1:{statusPort}/"
        print(f"== Configuration: {configPath}")
        print(f"== Status page:   {url}   (JSON: {url}status.json)")
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        # The level filter (info by default) that imapmig-daemon applies.
        command = [
            twistd, "-n", "--pidfile=", "--logger=imapmig.loglevels.twistdLogObserver",
            "imapmig", "--config", configPath,
        ]  # fmt: skip
        print("== Running:", " ".join(command))
        started = time.monotonic()
        log = open(os.path.join(base, "imapmig.log"), "wb")
        # Run the daemon from the same code as this demo, installed or not.
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        final: dict[str, object] | None = None
        while daemon.poll() is None and final is None:
            time.sleep(0.5)
            snapshot = _status(url + "status.json")
            if snapshot is None:
                continue
            job = snapshot["jobs"][0]  # type: ignore[index]
            total = job["messages_total"]
            print(
                f"   {job['state']:8} {job['messages_done']:>6}/"
                f"{'(not yet counted)' if total is None else total}"
                f" messages, {job['messages_failed']} failed,"
                f" {int(job['bytes_done']) / 2**20:.1f} MiB"
            )
            if job["state"] in ("done", "failed"):
                final = snapshot
        elapsed = time.monotonic() - started
        if final is None:
            print(f"== imapmig exited early with status {daemon.returncode}; see {base}/imapmig.log")
            return 1
        job = final["jobs"][0]  # type: ignore[index]
        print(f"== Job {job['state']} after {elapsed:.1f} s; final status.json:")
        print(json.dumps(final, indent=2))
        if args.keep:
            print(f"== The daemon keeps serving {url} ; Ctrl-C to stop it.")
            try:
                daemon.wait()
            except KeyboardInterrupt:
                pass
        daemon.terminate()
        daemon.wait()
        print(f"   (the daemon's log: {base}/imapmig.log)")

        print("== Checking the destination against the source")
        fetched = dovecot.fetchAll("demo")
        expected = Counter(("/".join(m.folder) if m.folder != ("INBOX",) else "INBOX") for m in corpus.messages)
        found = {name.replace(".", "/"): len(messages) for name, messages in fetched.items()}
        problems = 0
        for folder, count in sorted(expected.items()):
            have = found.get(folder, 0)
            mark = "ok" if have == count else "MISMATCH"
            problems += have != count
            print(f"   {folder:20} source {count:>5}  destination {have:>5}  {mark}")
        if problems or job["state"] != "done" or job["messages_failed"]:
            print("== Demo FAILED")
            return 1
        print("== Demo passed: every message is in Dovecot.")
        return 0
    finally:
        dovecot.stop()


def _portFree(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


if __name__ == "__main__":
    raise SystemExit(main())
