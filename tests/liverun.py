# -*- test-case-name: tests.test_browser -*-
"""
A live migration for the real-browser test (L{tests.test_browser}): the
daemon (C{python -m imapmig.daemon --config FILE}) as a child process,
migrating several Maildirs into accounts of a private Dovecot, slowed by
the configuration's per-account rate so that its progress can be watched
for half a minute, with its status listener on a free loopback port and a
control token in C{status.token_file}; and what the test reads besides the
page: C{/status.json} and C{/metrics} through a plain HTTP client, and the
IMAP sessions Dovecot holds per account (C{doveadm who}).

Everything here is synchronous and blocking, like L{imapmig.testing.dovecot}:
the test drives a browser through Selenium, which blocks, so no reactor
runs in the test process.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Sequence

import yaml
from attrs import frozen

from imapmig.testing.corpus import Corpus, writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser
from imapmig.testing.ports import listeningPorts
from tests.support import SOURCE_TREE, sourceTreeEnvironment, writePasswordFile

FOLDERS = (("INBOX",), ("Sent",), ("Archive",))
"""
The folders of every generated Maildir, so each job walks several.
"""


@frozen
class LiveJob:
    """
    One job of the live migration.

    @ivar name: the job's name (C{jobs[].name}).
    @ivar user: the Dovecot account it migrates into (one per job).
    @ivar corpus: what its Maildir holds.
    """

    name: str
    user: DovecotUser
    corpus: Corpus


@frozen
class LiveMigration:
    """
    The configuration of a live migration, written by L{writeLiveMigration}.

    @ivar configPath: the daemon's configuration file.
    @ivar directory: where it and everything else of the run live.
    @ivar jobs: the jobs, in configuration order.
    @ivar token: the content of C{status.token_file}.
    @ivar messagesPerSecond: each account's rate.
    """

    configPath: str
    directory: str
    jobs: tuple[LiveJob, ...]
    token: str
    messagesPerSecond: float

    @property
    def messagesTotal(self) -> int:
        """
        How many messages every job together migrates.
        """
        return sum(len(job.corpus.messages) for job in self.jobs)


def writeLiveMigration(
    directory: str,
    instance: DovecotInstance,
    jobs: Sequence[tuple[str, DovecotUser, int]],
    messagesPerSecond: float,
    token: str,
    seed: int = 18,
) -> LiveMigration:
    """
    Write a Maildir per job, a password file per account, the token file
    and the daemon's configuration: plain TCP to C{instance}, the
    C{per_account} rate C{messagesPerSecond}, the status listener on a
    port the kernel picks on 127.0.0.1 (C{tcp:0}; L{DaemonRun.statusPort}
    finds it), C{status.token_file} holding C{token}.

    @param jobs: per job its name, its account and how many messages.
    @param seed: the corpus generator's first seed (each job adds its index).
    """
    liveJobs = []
    configJobs = []
    for index, (name, user, count) in enumerate(jobs):
        maildir = os.path.join(directory, f"maildir-{index}")
        corpus = writeMaildir(maildir, count, seed=seed + index, folders=FOLDERS, profile="small")
        passwordFile = writePasswordFile(
            os.path.join(directory, f"password-{index}"), user.password
        )
        liveJobs.append(LiveJob(name, user, corpus))
        configJobs.append(
            {
                "name": name,
                "source": {"maildir": maildir},
                "destination": {
                    "server": "dovecot",
                    "user": user.name,
                    "password_file": passwordFile,
                },
            }
        )
    tokenFile = writePasswordFile(os.path.join(directory, "status-token"), token)
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": {"listen": "tcp:0:interface=127.0.0.1", "token_file": tokenFile},
        "servers": {
            "dovecot": {
                "endpoint": f"tcp:127.0.0.1:{instance.port}",
                "starttls": "off",
                "compress": "off",
                "per_account": {"messages_per_second": messagesPerSecond},
            }
        },
        "jobs": configJobs,
    }
    configPath = os.path.join(directory, "imapmig.yaml")
    with open(configPath, "w") as f:
        yaml.safe_dump(document, f, sort_keys=False)
    return LiveMigration(configPath, directory, tuple(liveJobs), token, messagesPerSecond)


class DaemonRun:
    """
    C{python -m imapmig.daemon --config FILE} (from L{SOURCE_TREE}) as a
    child process, its output in a file.

    @ivar logPath: its standard output and error.
    """

    def __init__(self, configPath: str, logPath: str) -> None:
        """
        Start it.

        @param configPath: its configuration.
        @param logPath: where its output goes.
        """
        self.logPath = logPath
        with open(logPath, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "imapmig.daemon", "--config", configPath],
                cwd=SOURCE_TREE,
                env=sourceTreeEnvironment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        """
        Its process id.
        """
        return self._process.pid

    def exitStatus(self) -> int | None:
        """
        Its exit status once it has exited (minus the signal that killed
        it), else L{None}.
        """
        return self._process.poll()

    def statusPort(self) -> int | None:
        """
        The TCP port it listens on (the status listener, its only one),
        read from C{/proc}: L{None} until it listens.

        @raise AssertionError: it has exited, or listens on several ports.
        """
        status = self.exitStatus()
        if status is not None:
            raise AssertionError(
                f"the daemon exited with status {status} before listening; its output ends:\n"
                + self.tail()
            )
        ports = listeningPorts(self.pid)
        if len(ports) > 1:
            raise AssertionError(f"the daemon listens on several ports: {ports}")
        return ports[0] if ports else None

    def stop(self, timeout: float = 60) -> int:
        """
        Stop it gracefully (C{SIGTERM}) and wait for it; kill it if it is
        still running after C{timeout} seconds.

        @return: its exit status.
        """
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            raise AssertionError(
                f"the daemon did not stop within {timeout} s of SIGTERM and was killed;"
                f" its output ends:\n{self.tail()}"
            ) from None

    def kill(self) -> None:
        """
        Kill it (C{SIGKILL}) unless it has exited: the test's cleanup.
        """
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()

    def tail(self, lines: int = 40) -> str:
        """
        The last C{lines} lines of its output, for a failure message.
        """
        with open(self.logPath, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])


@frozen
class Reply:
    """
    One HTTP reply.

    @ivar code: its status code.
    @ivar headers: its headers, names lower-cased.
    @ivar body: its body.
    """

    code: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """
        The body parsed as JSON.

        @raise AssertionError: it is not JSON.
        """
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise AssertionError(f"not JSON ({e}): {self.body[:200]!r}") from None


class StatusClient:
    """
    A plain HTTP client of the status listener, for what the test checks
    beside the page.
    """

    def __init__(self, port: int, timeout: float = 30) -> None:
        """
        @param port: the status listener's port on 127.0.0.1.
        @param timeout: seconds a request may take.
        """
        self.port = port
        self._timeout = timeout

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> Reply:
        """
        Send one request on a connection of its own.
        """
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self._timeout)
        try:
            connection.request(method, path, body=body or None, headers=headers or {})
            response = connection.getresponse()
            return Reply(
                response.status,
                {name.lower(): value for name, value in response.getheaders()},
                response.read(),
            )
        finally:
            connection.close()

    def status(self) -> dict[str, Any]:
        """
        C{GET /status.json}, asserting a 200 reply with a JSON object.
        """
        reply = self.request("GET", "/status.json")
        if reply.code != 200:
            raise AssertionError(f"GET /status.json: {reply.code} {reply.body[:200]!r}")
        document = reply.json()
        if not isinstance(document, dict):
            raise AssertionError(f"GET /status.json: not an object: {reply.body[:200]!r}")
        return document

    def job(self, name: str) -> dict[str, Any]:
        """
        The entry of job C{name} in C{/status.json}.

        @raise AssertionError: it is not on the first page.
        """
        for job in self.status().get("jobs", ()):
            if job.get("name") == name:
                assert isinstance(job, dict)
                return job
        raise AssertionError(f"job {name!r} is not in /status.json")

    def metrics(self) -> str:
        """
        C{GET /metrics}, asserting a 200 reply.
        """
        reply = self.request("GET", "/metrics")
        if reply.code != 200:
            raise AssertionError(f"GET /metrics: {reply.code} {reply.body[:200]!r}")
        return reply.body.decode("utf-8")


def sessionsOf(instance: DovecotInstance, user: str) -> int:
    """
    How many IMAP sessions Dovecot holds for C{user} now (C{doveadm who}):
    the independent proof that a paused job holds no connection.
    """
    done = subprocess.run(
        # The instance's own configuration, so doveadm asks its anvil.
        ["doveadm", "-c", instance._configPath, "-f", "flow", "who", "-1", user],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        raise AssertionError(f"doveadm who failed ({done.returncode}): {done.stderr.strip()}")
    return sum(1 for line in done.stdout.splitlines() if line.startswith(f"username={user} "))


def metricValue(text: str, name: str, labels: dict[str, str]) -> float | None:
    """
    The value of the sample C{name} whose labels include C{labels} in the
    Prometheus text C{text}, or L{None} when there is none.
    """
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def pollUntil(
    what: str,
    condition: Callable[[], Any],
    timeout: float,
    interval: float = 0.25,
    detail: Callable[[], str] = lambda: "",
) -> Any:
    """
    Call C{condition} until it returns something true, at most C{timeout}
    seconds: a bounded wait for something outside the browser (the
    daemon, Dovecot).  Waits inside the page are L{WebDriverWait}s.

    @param what: what is awaited, for the failure message.
    @param detail: more for the failure message (the daemon's log tail).
    @return: what C{condition} returned.
    @raise AssertionError: C{timeout} passed.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}. {detail()}")
        time.sleep(interval)
