"""
The configurations the demo and C{python -m imapmig.testing.dovecot}
write read back with every path intact, whatever the directory is named
(C{": "}, C{" #"}, commas and braces are YAML syntax when unquoted).
"""

from __future__ import annotations

import os
from typing import Any, cast

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.commands import demo
from imapmig.commands.demo import demoJob
from imapmig.errors import DovecotStartFailed
from imapmig.testing.dovecot import DovecotInstance, DovecotUser
from imapmig.testing.localserver import configurationHead, writeConfiguration

AWKWARD = "run: 1, try {2} #3 [x] 'y' \"z\""
"""
A directory name made of what YAML would read as syntax.
"""


class _Dovecot:
    """
    What a configuration needs of a L{DovecotInstance}.
    """

    port = 1143

    def __init__(self, base: str) -> None:
        self.caCertificatePath = os.path.join(base, "dovecot", "tls", "ca.pem")


class AwkwardDirectoryTests(SynchronousTestCase):
    """
    Configurations written in a directory named L{AWKWARD}.
    """

    def setUp(self) -> None:
        self.base = os.path.join(os.path.abspath(self.mktemp()), AWKWARD)
        os.makedirs(self.base)
        self.dovecot = cast(DovecotInstance, _Dovecot(self.base))

    def test_demo(self) -> None:
        """
        The demo's configuration names its state database, CA, Maildir and
        password file exactly.
        """
        passwordFile = os.path.join(self.base, "demo.pw")
        document: Any = yaml.safe_load(
            configurationHead("the demo", "one job", self.base, self.dovecot, 0)
            + demoJob(self.base, passwordFile)
        )
        self.assertEqual(document["state"], os.path.join(self.base, "state.sqlite"))
        self.assertEqual(
            document["servers"]["local"]["tls_ca"], self.dovecot.caCertificatePath
        )
        [job] = document["jobs"]
        self.assertEqual(job["source"], {"maildir": os.path.join(self.base, "Maildir")})
        self.assertEqual(job["destination"]["password_file"], passwordFile)

    def test_localServer(self) -> None:
        """
        The local server's configuration names its password files exactly.
        """
        pair = (DovecotUser("alice", "pw-a"), DovecotUser("bob", "pw-b"))
        with open(writeConfiguration(self.base, self.dovecot, [pair])) as f:
            document: Any = yaml.safe_load(f)
        self.assertEqual(document["state"], os.path.join(self.base, "state.sqlite"))
        [job] = document["jobs"]
        secrets = os.path.join(self.base, "secrets")
        self.assertEqual(job["source"]["password_file"], os.path.join(secrets, "alice.pw"))
        self.assertEqual(job["destination"]["password_file"], os.path.join(secrets, "bob.pw"))


class UnusableDovecotDirectoryTests(SynchronousTestCase):
    """
    A private Dovecot refuses a directory its configuration cannot carry,
    at once and saying why, instead of starting broken.
    """

    def test_colonOrHash(self) -> None:
        """
        A C{":"} (the passwd-file's separator: a home cut short, every
        APPEND refused with C{[SERVERBUG]}) or a C{"#"} (a comment in
        C{dovecot.conf}: Dovecot exits with status 89) in the directory:
        L{DovecotStartFailed} naming the character, and nothing written.
        """
        for name, character in (("demo: 1", "':'"), ("demo#1", "'#'")):
            base = os.path.join(os.path.abspath(self.mktemp()), name)
            instance = DovecotInstance(base, users=(DovecotUser("demo", "pw"),))
            error = self.assertRaises(DovecotStartFailed, instance.start)
            self.assertIn(
                f"has {character}, which Dovecot's configuration cannot carry", str(error)
            )
            self.assertFalse(os.path.exists(base))

    def test_percent(self) -> None:
        """
        A C{"%"} in the directory (Dovecot expands C{%} variables in the
        passwd-file's path and homes: measured, a directory C{100%} made
        every login C{NO [UNAVAILABLE] Temporary authentication failure},
        which imapmig retries for minutes; C{a%ub} made it
        C{[AUTHENTICATIONFAILED]}) is refused too, naming it.
        """
        base = os.path.join(os.path.abspath(self.mktemp()), "100%")
        instance = DovecotInstance(base, users=(DovecotUser("demo", "pw"),))
        # Were it to start after all, it is not left running.
        self.addCleanup(instance.stop)
        error = self.assertRaises(DovecotStartFailed, instance.start)
        self.assertIn("has '%', which Dovecot's configuration cannot carry", str(error))
        self.assertFalse(os.path.exists(base))


class _Alive:
    """
    A daemon process that runs on and never listens, as
    L{imapmig.commands.demo._listening} sees one.
    """

    pid = 4242

    def poll(self) -> int | None:
        return None


class ListeningTests(SynchronousTestCase):
    """
    L{imapmig.commands.demo._listening} waits for the demo's daemon to listen.
    """

    def test_givesUp(self) -> None:
        """
        A daemon that runs on without listening (hung before its listener,
        or a C{/proc} that shows no sockets) is waited for at most
        C{timeout} seconds: L{None}, the demo then says so and stops it,
        instead of waiting forever.
        """
        now = [0.0]
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            now[0] += seconds

        port = demo._listening(
            cast(Any, _Alive()), timeout=5.0, clock=lambda: now[0], sleep=sleep,
            ports=lambda pid: [],
        )  # fmt: skip
        self.assertIsNone(port)
        self.assertGreaterEqual(now[0], 5.0)
        self.assertLess(now[0], 5.2)

    def test_port(self) -> None:
        """
        The port the daemon listens on, once it does.
        """
        answers = [[], [], [8025]]
        port = demo._listening(
            cast(Any, _Alive()), timeout=5.0, clock=lambda: 0.0, sleep=lambda s: None,
            ports=lambda pid: answers.pop(0),
        )  # fmt: skip
        self.assertEqual(port, 8025)
