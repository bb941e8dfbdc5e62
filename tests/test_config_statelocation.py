# -*- test-case-name: tests.test_config_statelocation -*-
"""
Tests for L{imapmig.config.statelocation}: C{state} as a SQLite file or a
PostgreSQL libpq URI, and the keys that go with a URI.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from imapmig.config import Config, PostgreSQLState, SQLiteState, parseConfig
from imapmig.config.model import FleetConfig
from imapmig.config import statelocation
from imapmig.config.statelocation import DEFAULT_STATE_PATH
from imapmig.access.secrets import Secret
from imapmig.errors import ConfigError
from tests.test_config import writeFile

SECRET = "s3cret-Pa55"


class StateTestCase(SynchronousTestCase):
    """
    A directory for the configuration, and readers of one.
    """

    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        self.path = os.path.join(self.directory, "imapmig.yaml")

    def document(self, **top: object) -> dict[str, Any]:
        """
        A configuration of one job, with the settings C{top}; with a
        PostgreSQL C{state}, the fleet C{acme} unless C{top} gives
        C{fleet} (C{fleet=None}: none).
        """
        export = os.path.join(self.directory, "export")
        os.makedirs(export, exist_ok=True)
        state = top.get("state")
        if isinstance(state, str) and state.startswith("postgres") and "fleet" not in top:
            top["fleet"] = {"name": "acme"}
        if top.get("fleet", ()) is None:
            del top["fleet"]
        return {
            "servers": {"new": {"endpoint": "tcp:127.0.0.1:143", "starttls": "off"}},
            "jobs": [
                {
                    "name": "a",
                    "source": {"eml_dir": export},
                    "destination": {"server": "new", "user": "u", "password": "p"},
                }
            ],
            "status": "off",
            **top,
        }

    def load(self, environ: dict[str, str] | None = None, /, **top: object) -> Config:
        """
        The configuration of L{document}.
        """
        return parseConfig(self.document(**top), self.path, environ or {})

    def problems(self, **top: object) -> list[str]:
        """
        The problems of L{document}, after checking that none shows
        L{SECRET}.
        """
        e = self.assertRaises(ConfigError, self.load, **top)
        for problem in e.problems:
            self.assertNotIn(SECRET, problem)
        return list(e.problems)

    def state(self, uri: str, **top: object) -> PostgreSQLState:
        """
        The PostgreSQL state C{uri} reads as.
        """
        state = self.load(state=uri, **top).state
        assert isinstance(state, PostgreSQLState)
        return state


class SQLiteTests(StateTestCase):
    """
    C{state} as a file, as before.
    """

    def test_path(self) -> None:
        """
        A path is a SQLite file, made absolute against the file's directory;
        L{Config.statePath} is its path.
        """
        config = self.load(state="state.sqlite")
        expected = os.path.join(self.directory, "state.sqlite")
        self.assertEqual(config.state, SQLiteState(expected))
        self.assertEqual(config.statePath, expected)
        self.assertEqual(config.state.describe(), f"SQLite database {expected}")

    def test_default(self) -> None:
        """
        Without C{state}, the default SQLite file.
        """
        self.assertEqual(DEFAULT_STATE_PATH, "/var/lib/imapmig/state.sqlite")
        default = os.path.join(self.directory, "default.sqlite")
        self.patch(statelocation, "DEFAULT_STATE_PATH", default)
        self.assertEqual(self.load().state, SQLiteState(default))

    def test_otherScheme(self) -> None:
        """
        A URI of another scheme is refused, not taken for a file's name.
        """
        for uri, scheme in (("mysql://u@h/db", "mysql"), ("PostgreSQL://u@h/db", "PostgreSQL")):
            self.assertEqual(
                self.problems(state=uri),
                [
                    f"{self.path}: state: a URI of scheme {scheme!r}: give a SQLite file's path"
                    " or postgresql://USER@HOST:PORT/DBNAME"
                ],
            )

    def test_postgreSQLKeysRefused(self) -> None:
        """
        The keys that go with a PostgreSQL state are refused beside a
        SQLite one, each by its name.
        """
        self.assertEqual(
            self.problems(
                state="state.sqlite",
                state_password_file="pw",
                state_password_credential="pg",
                state_allow_plaintext=True,
                fleet={"name": "acme"},
            ),
            [
                f"{self.path}: {key}: goes with a PostgreSQL state"
                " (state: postgresql://...), not a SQLite file"
                for key in (
                    "state_password_file", "state_password_credential", "state_allow_plaintext",
                    "fleet",
                )
            ],
        )


class URITests(StateTestCase):
    """
    C{state} as a libpq URI.
    """

    def test_uri(self) -> None:
        """
        A URI is read into its parts, its parameters kept as given and in
        order; L{PostgreSQLState.uri} writes it again.
        """
        uri = (
            "postgresql://imapmig@db.example.org:5433/migration"
            "?sslmode=verify-full&sslrootcert=/etc/ssl/db.pem&connect_timeout=10"
            "&application_name=imapmig-a"
        )
        state = self.state(uri)
        self.assertEqual(
            state,
            PostgreSQLState(
                dbname="migration",
                host="db.example.org",
                port=5433,
                user="imapmig",
                parameters=(
                    ("sslmode", "verify-full"),
                    ("sslrootcert", "/etc/ssl/db.pem"),
                    ("connect_timeout", "10"),
                    ("application_name", "imapmig-a"),
                ),
            ),
        )
        self.assertEqual(state.uri(), uri)
        self.assertEqual(state.describe(), f"PostgreSQL database {uri}")

    def test_escapes(self) -> None:
        """
        Percent-escapes are decoded, and C{+} is itself, as libpq reads
        them; the URI written again reads the same.
        """
        uri = "postgresql://im%40pmig@localhost/mi%2Fgration?options=-c%20geqo%3Doff&application_name=a+b"
        state = self.state(uri)
        self.assertEqual(
            (state.user, state.dbname, state.parameters),
            ("im@pmig", "mi/gration", (("options", "-c geqo=off"), ("application_name", "a+b"))),
        )
        self.assertEqual(self.state(state.uri()), state)

    def test_keywords(self) -> None:
        """
        L{PostgreSQLState.keywords} are libpq's connection keywords, without
        the password.
        """
        path = writeFile(os.path.join(self.directory, "pg.pw"), SECRET + "\n")
        state = self.state(
            "postgresql://u@[::1]:5433/db?sslmode=disable&connect_timeout=5",
            state_password_file=path,
        )
        self.assertEqual(
            state.keywords(),
            {"dbname": "db", "host": "::1", "port": "5433", "user": "u",
             "sslmode": "disable", "connect_timeout": "5"},
        )
        self.assertEqual(PostgreSQLState(dbname="db").keywords(), {"dbname": "db"})

    def test_postgresScheme(self) -> None:
        """
        C{postgres://} is the same as C{postgresql://}; user and port may
        be left to libpq.
        """
        self.assertEqual(
            self.state("postgres://localhost/imapmig"),
            PostgreSQLState(dbname="imapmig", host="localhost"),
        )

    def test_ipv6(self) -> None:
        """
        An IPv6 address is written in brackets.
        """
        state = self.state("postgresql://u@[::1]:5432/db")
        self.assertEqual((state.host, state.port), ("::1", 5432))
        self.assertEqual(state.uri(), "postgresql://u@[::1]:5432/db")

    def test_socket(self) -> None:
        """
        A Unix socket directory, percent-encoded as the host or given as
        C{?host=}, or no host at all (libpq's socket): on this machine, so
        no C{sslmode} is needed.
        """
        for uri in (
            "postgresql://u@%2Frun%2Fpostgresql/db",
            "postgresql://u@/db?host=/run/postgresql",
        ):
            self.assertEqual(
                self.state(uri), PostgreSQLState(dbname="db", host="/run/postgresql", user="u")
            )
        self.assertEqual(self.state("postgresql:///db"), PostgreSQLState(dbname="db"))

    def test_filesMadeAbsolute(self) -> None:
        """
        File parameters are relative to the configuration's directory, as
        every path in it; C{sslrootcert=system} is kept.
        """
        state = self.state("postgresql://localhost/db?sslrootcert=ca.pem&sslkey=k/key.pem")
        self.assertEqual(
            state.parameters,
            (
                ("sslrootcert", os.path.join(self.directory, "ca.pem")),
                ("sslkey", os.path.join(self.directory, "k/key.pem")),
            ),
        )
        self.assertEqual(
            self.state("postgresql://localhost/db?sslrootcert=system").parameters,
            (("sslrootcert", "system"),),
        )

    def test_statePathRefused(self) -> None:
        """
        L{Config.statePath}, which what needs the SQLite file itself reads,
        refuses a PostgreSQL state with one line naming C{state};
        L{Config.localDirectory} is then the working directory, and the
        SQLite file's directory otherwise.
        """
        config = self.load(state="postgresql://u@localhost/db")
        e = self.assertRaises(ConfigError, lambda: config.statePath)
        self.assertEqual(
            e.problems,
            (
                f"{self.path}: state: postgresql://u@localhost/db is a PostgreSQL database,"
                " not a SQLite file: give a SQLite file's path",
            ),
        )
        self.assertEqual(config.localDirectory, os.getcwd())
        self.assertEqual(self.load(state="state.sqlite").localDirectory, self.directory)


class URIProblemTests(StateTestCase):
    """
    What a URI may not be, each refused with one line naming C{state}, and
    no secret in any.
    """

    def assertProblem(self, uri: str, problem: str, **top: object) -> None:
        """
        C{uri} is refused with C{problem} alone.
        """
        self.assertEqual(self.problems(state=uri, **top), [f"{self.path}: state: {problem}"])

    def test_passwordInURI(self) -> None:
        """
        A password in the URI is refused without showing it, even where it
        holds C{/} or C{@}.
        """
        for uri in (
            f"postgresql://u:{SECRET}@localhost/db",
            f"postgresql://u:{SECRET}@x@localhost/db",
        ):
            self.assertProblem(
                uri,
                "a password in the URI; give state_password_file or state_password_credential",
            )
        for uri in (
            f"postgresql://u:s/{SECRET}@localhost/db",
            f"postgresql://u:s?{SECRET}@localhost/db",
            # Read as the host u, the port 1234 and the database
            # "{SECRET}@localhost/db" (found from outside).
            f"postgresql://u:1234/{SECRET}@localhost/db",
            f"postgresql://u:1234?{SECRET}@localhost/db",
            "postgresql://localhost:5432/db?application_name=a@b",
            "postgresql://[::1]/db@x",
        ):
            self.assertProblem(
                uri,
                "a password in the URI; give state_password_file or state_password_credential:"
                " an '@' after the host is refused, as the end of a password holding '/' or '?'"
                " (an '@' of a database name or a parameter is written %40)",
            )
        # Written %40, an '@' is a database name's or a parameter's.
        self.assertEqual(self.state("postgresql://localhost:5432/d%40b").dbname, "d@b")
        self.state("postgresql://[::1]/db?application_name=a%40b")

    def test_passwordParameter(self) -> None:
        """
        C{password} and C{sslpassword} parameters are refused without
        showing them.
        """
        self.assertProblem(
            f"postgresql://u@localhost/db?password={SECRET}",
            "parameter password: a password in the URI;"
            " give state_password_file or state_password_credential",
        )
        self.assertProblem(
            f"postgresql://u@localhost/db?sslpassword={SECRET}",
            "parameter sslpassword: a key's password in the URI;"
            " use an unencrypted key file only its owner may read",
        )

    def test_unknownParameter(self) -> None:
        """
        A parameter libpq does not document is refused, with the one it is
        close to.
        """
        self.assertProblem(
            "postgresql://localhost/db?ssl_mode=require",
            "unknown parameter 'ssl_mode' (did you mean 'sslmode'?)",
        )
        self.assertProblem("postgresql://localhost/db?zzz=1", "unknown parameter 'zzz'")

    def test_badValues(self) -> None:
        """
        A parameter's value is checked as libpq would.
        """
        self.assertProblem(
            "postgresql://localhost/db?sslmode=on",
            "parameter sslmode: must be one of disable, allow, prefer, require,"
            " verify-ca, verify-full, not 'on'",
        )
        self.assertProblem(
            "postgresql://localhost/db?connect_timeout=ten",
            "parameter connect_timeout: must be a whole number, not 'ten'",
        )
        self.assertProblem(
            "postgresql://localhost/db?application_name=",
            "parameter application_name: must not be empty",
        )
        self.assertProblem(
            "postgresql://localhost/db?sslmode=require&sslmode=disable",
            "parameter sslmode is given more than once",
        )

    def test_malformed(self) -> None:
        """
        A query that is not NAME=VALUE pairs, or a fragment, is refused.
        """
        self.assertProblem(
            "postgresql://localhost/db?sslmode",
            "malformed parameters: write ?NAME=VALUE&NAME=VALUE",
        )
        self.assertProblem(
            "postgresql://localhost/db#x", "a fragment ('#...') has no meaning in a libpq URI"
        )
        self.assertProblem(
            "postgresql://[::1/db",
            "malformed host: an IPv6 address is written [ADDRESS]:PORT",
        )

    def test_noDatabase(self) -> None:
        """
        The database must be named.
        """
        for uri in ("postgresql://u@localhost", "postgresql://u@localhost:5432/"):
            self.assertProblem(uri, "no database name: postgresql://USER@HOST:PORT/DBNAME")

    def test_port(self) -> None:
        """
        The port is a number from 1 to 65535.
        """
        for port in ("abc", "0", "65536", "-1"):
            self.assertProblem(
                f"postgresql://localhost:{port}/db",
                "the port is not a number between 1 and 65535",
            )

    def test_severalHosts(self) -> None:
        """
        A list of hosts is refused, however it is written.
        """
        problem = (
            "several hosts are not supported: give the one primary"
            " (a fleet's leases need one database; put a failover behind one name)"
        )
        self.assertProblem("postgresql://a:5432,b:5432/db", problem)
        self.assertProblem("postgresql:///db?host=a,b", problem)
        self.assertProblem("postgresql:///db?hostaddr=127.0.0.1,127.0.0.2", f"parameter hostaddr: {problem}")
        self.assertProblem(
            "postgresql://a/db?load_balance_hosts=random",
            "parameter load_balance_hosts: one host only (a fleet needs its one primary)",
        )

    def test_partsTwice(self) -> None:
        """
        The parts the URI writes itself are refused as parameters, and a
        host is given once.
        """
        self.assertProblem(
            "postgresql://localhost/db?port=5432",
            "parameter port: write the port in the URI (postgresql://USER@HOST:PORT/DBNAME)",
        )
        self.assertProblem(
            "postgresql://localhost/db?service=imapmig",
            "parameter service: a service file's settings are not read; write them in the URI",
        )
        self.assertProblem(
            "postgresql://localhost/db?host=/run/postgresql",
            "host is given twice, in the URI and as ?host=",
        )


class TLSTests(StateTestCase):
    """
    Toward a host that is not this machine, only C{sslmode=verify-full},
    unless C{state_allow_plaintext: true}.
    """

    def test_remoteNeedsVerifyFull(self) -> None:
        """
        No C{sslmode}, or one weaker than C{verify-full}, toward another
        host is refused.
        """
        advice = (
            " which is not this machine: the password and the state could be read"
            " or altered on the way; add ?sslmode=verify-full (with sslrootcert=FILE,"
            " or system), or set state_allow_plaintext: true to accept it"
        )
        self.assertEqual(
            self.problems(state="postgresql://u@db.example.org/db"),
            [f"{self.path}: state: no sslmode (libpq's default is prefer) toward db.example.org,{advice}"],
        )
        for mode in ("disable", "allow", "prefer", "require", "verify-ca"):
            self.assertEqual(
                self.problems(state=f"postgresql://u@db.example.org/db?sslmode={mode}"),
                [f"{self.path}: state: sslmode={mode} toward db.example.org,{advice}"],
            )
        self.assertEqual(
            self.problems(state="postgresql://u@localhost/db?hostaddr=192.0.2.1"),
            [
                f"{self.path}: state: no sslmode (libpq's default is prefer)"
                f" toward localhost,{advice}"
            ],
        )

    def test_verifyFull(self) -> None:
        """
        C{sslmode=verify-full} is accepted toward any host.
        """
        state = self.state("postgresql://u@db.example.org/db?sslmode=verify-full")
        self.assertFalse(state.allowPlaintext)

    def test_loopback(self) -> None:
        """
        Toward this machine any C{sslmode} is accepted: a loopback name or
        address, or C{hostaddr} on loopback (a tunnel).
        """
        for uri in (
            "postgresql://u@127.0.0.1/db?sslmode=disable",
            "postgresql://u@[::1]/db",
            "postgresql://u@localhost/db",
            "postgresql://u@db.example.org/db?hostaddr=127.0.0.1",
        ):
            self.state(uri)

    def test_allowPlaintext(self) -> None:
        """
        C{state_allow_plaintext: true} accepts a weaker C{sslmode} toward
        another host, and says so; it must be a boolean.
        """
        state = self.state(
            "postgresql://u@db.example.org/db?sslmode=require", state_allow_plaintext=True
        )
        self.assertTrue(state.allowPlaintext)
        self.assertEqual(
            self.problems(state="postgresql://u@localhost/db", state_allow_plaintext="yes"),
            [f"{self.path}: state_allow_plaintext: must be true or false, not a string"],
        )


class PasswordTests(StateTestCase):
    """
    C{state_password_file} and C{state_password_credential}.
    """

    uri = "postgresql://imapmig@localhost/db"

    def test_file(self) -> None:
        """
        The password is the file's first line; the state keeps where it
        was read, and its C{repr} hides the password.
        """
        path = writeFile(os.path.join(self.directory, "pg.pw"), SECRET + "\n")
        state = self.state(self.uri, state_password_file="pg.pw")
        self.assertEqual(
            (state.password, state.passwordPath, state.passwordKey),
            (Secret(SECRET), path, "state_password_file"),
        )
        self.assertNotIn(SECRET, repr(state))
        self.assertEqual(state.uri(), self.uri)

    def test_looseFile(self) -> None:
        """
        A password file its group or others may read is refused, as every
        password file is.
        """
        path = writeFile(os.path.join(self.directory, "pg.pw"), SECRET + "\n", 0o644)
        [problem] = self.problems(state=self.uri, state_password_file=path)
        self.assertTrue(
            problem.startswith(f"{self.path}: state_password_file: PostgreSQL password file {path}"),
            problem,
        )

    def test_credential(self) -> None:
        """
        A systemd credential is read from C{$CREDENTIALS_DIRECTORY}.
        """
        credentials = os.path.join(self.directory, "credentials")
        os.makedirs(credentials)
        path = writeFile(os.path.join(credentials, "pg"), SECRET + "\n", 0o400)
        state = self.load({"CREDENTIALS_DIRECTORY": credentials}, state=self.uri,
                          state_password_credential="pg").state
        assert isinstance(state, PostgreSQLState)
        self.assertEqual(
            (state.password, state.passwordPath, state.passwordKey),
            (Secret(SECRET), path, "state_password_credential"),
        )

    def test_neither(self) -> None:
        """
        Without either, libpq finds the password (C{PGPASSFILE},
        C{~/.pgpass}) or needs none.
        """
        state = self.state(self.uri)
        self.assertEqual((state.password, state.passwordPath, state.passwordKey), (None, None, None))

    def test_both(self) -> None:
        """
        Both keys are refused.
        """
        self.assertEqual(
            self.problems(state=self.uri, state_password_file="a", state_password_credential="b"),
            [
                f"{self.path}: state_password_file: give one of state_password_file"
                " or state_password_credential, not both"
            ],
        )


class FleetTests(StateTestCase):
    """
    C{fleet}: the fleet of daemons sharing a PostgreSQL state.
    """

    uri = "postgresql://imapmig@localhost/db"

    def test_fleet(self) -> None:
        """
        C{fleet.name} and C{fleet.lease} make L{Config.fleet}; the lease is
        60 s by default.
        """
        self.assertEqual(
            self.load(state=self.uri, fleet={"name": "acme-2026", "lease": 30}).fleet,
            FleetConfig(name="acme-2026", lease=30.0),
        )
        fleet = self.load(state=self.uri, fleet={"name": "acme"}).fleet
        self.assertEqual(fleet, FleetConfig(name="acme", lease=60.0))
        assert fleet is not None
        self.assertEqual(fleet.describe(), "acme (lease 60 s)")

    def test_sqliteHasNone(self) -> None:
        """
        Beside a SQLite file there is no fleet.
        """
        self.assertIsNone(self.load(state="state.sqlite").fleet)

    def test_required(self) -> None:
        """
        A PostgreSQL state without C{fleet} is refused, naming the key.
        """
        self.assertEqual(
            self.problems(state=self.uri, fleet=None),
            [
                f"{self.path}: fleet: required with a PostgreSQL state: give fleet: {{name: NAME}},"
                " the same name on every daemon sharing the database"
            ],
        )

    def test_nameRequired(self) -> None:
        """
        C{fleet.name} is required.
        """
        self.assertEqual(
            self.problems(state=self.uri, fleet={"lease": 60}),
            [
                f"{self.path}: fleet.name: required: the fleet's name, the same on every daemon"
                " sharing the database"
            ],
        )

    def test_badName(self) -> None:
        """
        A name of other characters, or longer than 63, is refused.
        """
        for name in ("acme 2026", "-acme", "a" * 64):
            self.assertEqual(
                self.problems(state=self.uri, fleet={"name": name}),
                [
                    f"{self.path}: fleet.name: invalid fleet name {name!r}: use letters, digits"
                    " and . _ @ -, starting with a letter or digit, at most 63 characters"
                ],
            )
        self.assertEqual(self.load(state=self.uri, fleet={"name": "a" * 63}).fleet,
                         FleetConfig("a" * 63))

    def test_lease(self) -> None:
        """
        The lease is between 10 and 600 seconds.
        """
        for lease in (9.5, 601):
            self.assertEqual(
                self.problems(state=self.uri, fleet={"name": "acme", "lease": lease}),
                [
                    f"{self.path}: fleet.lease: must be between 10 and 600 seconds, not {lease}"
                    " (a daemon renews it every twelfth of it; a dead daemon's jobs wait that long)"
                ],
            )
        for lease in (10, 600):
            fleet = self.load(state=self.uri, fleet={"name": "acme", "lease": lease}).fleet
            assert fleet is not None
            self.assertEqual(fleet.lease, float(lease))
        self.assertEqual(
            self.problems(state=self.uri, fleet={"name": "acme", "lease": "60s"}),
            [f"{self.path}: fleet.lease: expected a number of seconds, got a string"],
        )

    def test_unknownKey(self) -> None:
        """
        An unknown key of C{fleet} is refused with a hint.
        """
        self.assertEqual(
            self.problems(state=self.uri, fleet={"name": "acme", "leese": 60}),
            [f"{self.path}: fleet.leese: unknown key 'leese' (did you mean 'lease'?)"],
        )

    def test_notAMapping(self) -> None:
        """
        C{fleet} is a mapping.
        """
        self.assertEqual(
            self.problems(state=self.uri, fleet="acme"),
            [f"{self.path}: fleet: expected a mapping, got a string"],
        )


class DriverTests(StateTestCase):
    """
    A PostgreSQL state needs psycopg, the C{imapmig[postgresql]} extra.
    """

    def test_missing(self) -> None:
        """
        Without psycopg, a PostgreSQL state is refused with one line
        naming C{state} and the extra, rather than a traceback at start.
        """
        self.patch(statelocation, "driverInstalled", lambda: False)
        self.assertEqual(
            self.problems(state="postgresql://u@localhost/db"),
            [
                f"{self.path}: state: a PostgreSQL state needs psycopg, which is not installed:"
                " install imapmig with its postgresql extra (pip install 'imapmig[postgresql]')"
            ],
        )
        self.assertIsInstance(self.load(state="state.sqlite").state, SQLiteState)

    def test_installed(self) -> None:
        """
        Here it is installed (the test environment has the extra).
        """
        self.assertTrue(statelocation.driverInstalled())
