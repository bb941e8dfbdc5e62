# -*- test-case-name: tests.test_config -*-
"""
The configuration's values: frozen, typed, parsed once by
L{imapmig.config}.
"""

from __future__ import annotations

import os
from typing import Iterator, Mapping, Protocol
from urllib.parse import quote, urlencode

from attrs import field, frozen

from imapmig.config.limits import ServerLimits
from imapmig.mail.folders import FolderRules, PersonalNamespace
from imapmig.access.secrets import Secret
from imapmig.errors import ConfigError

@frozen
class ServerConfig:
    """
    A destination IMAP server.

    @ivar name: its name under C{servers}.
    @ivar endpoint: the endpoint string as written (C{tcp:HOST:PORT} or
        C{tls:HOST:PORT}).
    @ivar starttls: whether to upgrade the connection with STARTTLS before
        logging in, refusing servers that do not offer it.
    @ivar implicitTLS: whether TLS starts as soon as the connection is made
        (a C{tls:} endpoint).
    @ivar tcpEndpoint: the description to give C{clientFromString}: the
        endpoint itself for C{tcp:}, rewritten to C{tcp:} for C{tls:} (TLS
        is then layered on it with L{tlsHostname} and L{tlsCA}), with
        C{timeout=} L{timeout} added where it sets no connect timeout.
    @ivar tlsHostname: the name the server's certificate must carry.
    @ivar tlsCA: a PEM file of the certificates to trust, or L{None} for
        the system trust store.
    @ivar timeout: seconds a command may stay outstanding without any reply
        before the connection is dropped.
    @ivar compress: whether to turn on COMPRESS=DEFLATE (RFC 4978) where
        the server offers it: the C{compress} key, its C{auto} resolved to
        true unless the endpoint's host is a loopback address.
    @ivar namespace: the personal namespace to believe instead of the
        server's NAMESPACE response (the C{namespace} key, for a server
        that lies or has none), or L{None} to ask the server.
    @ivar preset: the name of its preset (L{imapmig.config.presets}), or
        L{None}.
    @ivar labelViews: what becomes of a source's label views (Gmail's
        C{[Gmail]/All Mail}, Important, Starred): C{"auto"} (C{"dedup"}
        where the server offers X-GM-EXT-1, else C{"copy"}), C{"dedup"} or
        C{"copy"} (see L{imapmig.sources.labelviews}).
    @ivar archiveFolder: where the messages found only in a source's All
        Mail go when its label views are de-duplicated without X-GM-EXT-1
        (the C{archive_folder} key: a folder path, levels joined with
        C{/}), or L{None} (C{off}): they are not copied, but recorded as not
        migrated (see L{imapmig.sources.labelviews}).
    @ivar maxMessageSize: the largest message, in octets, to APPEND into
        an account of this server (a larger one is recorded as failed
        without being sent; the server's APPENDLIMIT, when smaller, wins),
        or L{None} for the server's APPENDLIMIT alone.
    @ivar limits: the server's and its accounts' limits, shared by every
        job (connections, rates, daily budgets); by default none.
    """

    name: str
    endpoint: str
    starttls: bool
    implicitTLS: bool
    tcpEndpoint: str
    tlsHostname: str
    tlsCA: str | None
    timeout: float
    compress: bool
    namespace: PersonalNamespace | None = None
    preset: str | None = None
    labelViews: str = "auto"
    archiveFolder: str | None = "Archive"
    maxMessageSize: int | None = None
    limits: ServerLimits = ServerLimits()


@frozen
class PipelineConfig:
    """
    Limits of one connection's APPEND pipeline.

    @ivar windowMessages: messages in flight awaiting their reply.
    @ivar windowBytes: octets in flight awaiting their reply.
    @ivar batchMessages: messages per MULTIAPPEND command (1: no MULTIAPPEND).
    @ivar batchBytes: octets per MULTIAPPEND command.
    @ivar batchGrowth: into a mailbox of more than C{batchGrowth *
        batchMessages} messages, a MULTIAPPEND command carries one message
        per C{batchGrowth} it holds, up to half of C{windowMessages}; 0:
        never more than C{batchMessages}.
    """

    windowMessages: int
    windowBytes: int
    batchMessages: int
    batchBytes: int
    batchGrowth: int = 100


@frozen
class RetryConfig:
    """
    How a job retries after a transient failure (a lost connection, a
    timeout, a busy server).

    @ivar attempts: consecutive attempts that migrate nothing before the
        job fails.
    @ivar maxDelay: the longest wait between attempts, in seconds.
    @ivar messageAttempts: how many connection failures a message may be
        first in line for before it is recorded as failed.
    @ivar quotaPause: seconds a job pauses when the server says it is over
        quota or over a bandwidth limit.
    """

    attempts: int = 10
    maxDelay: int = 300
    messageAttempts: int = 3
    quotaPause: int = 3600


@frozen
class MaildirSourceConfig:
    """
    A Maildir (with Maildir++ subfolders) to migrate.

    @ivar path: the Maildir's absolute path.
    """

    path: str


@frozen
class EmlSourceConfig:
    """
    A directory of C{.eml} files to migrate into one folder.

    @ivar path: the directory's absolute path.
    @ivar folder: the destination folder's hierarchy, one component per
        level: C{("INBOX",)}, C{("Archive", "2019")}.
    """

    path: str
    folder: tuple[str, ...]


@frozen
class MboxSourceConfig:
    """
    An mbox file (one folder, INBOX), or a directory of mbox files (one
    folder each), to migrate.

    @ivar path: the file's or directory's absolute path.
    @ivar quoting: how C{From } lines in bodies were escaped: C{"mboxrd"}
        (every C{>*From } got one more C{>}) or C{"mboxo"} (only
        C{From } became C{>From }).
    """

    path: str
    quoting: str


@frozen
class TokenFileConfig:
    """
    An OAuth 2.0 access token kept in a file (C{oauth2: {token_file: FILE}}),
    re-read at every login so that an external refresher can replace it.

    @ivar path: the file's absolute path; the token is its first line.
    """

    path: str


@frozen
class TokenCommandConfig:
    """
    An OAuth 2.0 access token printed by a command
    (C{oauth2: {token_command: [ARGV...]}}), run at every login.

    @ivar argv: the command and its arguments, as written (run without a
        shell).
    @ivar executable: the absolute path of C{argv[0]}.
    @ivar timeout: seconds the command may run before it is killed.
    """

    argv: tuple[str, ...]
    executable: str
    timeout: float = 30.0


@frozen
class TokenRefreshConfig:
    """
    An OAuth 2.0 access token that imapmig obtains itself from a token
    endpoint with a refresh token (the RFC 6749 refresh grant,
    C{oauth2: {token_endpoint: URL, client_id: ID, refresh_token_file: FILE}}),
    cached and renewed before it expires.

    @ivar tokenEndpoint: the endpoint's URL: C{https}, or C{http} to a
        loopback address only.
    @ivar clientId: the OAuth client's identifier.
    @ivar clientSecret: the client's secret (from C{client_secret_file}),
        or L{None} for a public client.
    @ivar refreshTokenFile: the absolute path of the file holding the
        refresh token (first line); a rotated refresh token is written
        back to it.
    @ivar scope: the C{scope} to ask for, or L{None} to leave it out.
    @ivar timeout: seconds a request to the endpoint may take.
    @ivar tlsCA: a PEM file of the certificates to trust for an C{https}
        endpoint, or L{None} for the system trust store.
    """

    tokenEndpoint: str
    clientId: str
    clientSecret: Secret | None
    refreshTokenFile: str
    scope: str | None = None
    timeout: float = 30.0
    tlsCA: str | None = None


TokenSourceConfig = TokenFileConfig | TokenCommandConfig | TokenRefreshConfig


@frozen
class AccountConfig:
    """
    An account on an IMAP server.

    @ivar server: the server holding the account.
    @ivar user: the account's user name (its login name, or the user an
        admin acts for).
    @ivar password: the password to log in with (redacted in C{repr}):
        the user's, or the admin's when there is an L{admin}; L{None} with
        L{oauth2}.
    @ivar admin: the login name of an admin ("master user") who logs in
        on behalf of L{user} (SASL PLAIN with an authorization identity),
        or L{None} for the user's own login.
    @ivar oauth2: where the user's OAuth 2.0 access token comes from (for
        XOAUTH2 or OAUTHBEARER), or L{None} for a password login.
    @ivar credentialKey: the configuration key that holds the credential
        (C{"jobs[0].destination.password_file"}), named when the server
        refuses the login; L{None} when not known.
    """

    server: ServerConfig
    user: str
    password: Secret | None
    admin: str | None = None
    oauth2: TokenSourceConfig | None = None
    # Where the credential was read from: not part of what the account
    # is (a job whose row moved in a user list is not changed by it).
    credentialKey: str | None = field(default=None, eq=False)


@frozen
class ImapSourceConfig(AccountConfig):
    """
    An account on an IMAP server to migrate from (read-only).
    """


SourceConfig = MaildirSourceConfig | EmlSourceConfig | MboxSourceConfig | ImapSourceConfig


@frozen
class DestinationConfig(AccountConfig):
    """
    The account a job migrates into.
    """


@frozen
class JobConfig:
    """
    One migration: a source into a destination account.

    @ivar name: unique among jobs; names the job in logs, the status
        resource and the state store.
    @ivar connections: parallel connections to the destination.
    @ivar pipeline: the APPEND pipeline's limits for each connection.
    @ivar folders: which folders to migrate, and where.
    @ivar identity: how messages already in the destination are recognised:
        C{"fingerprint"} (Message-ID, a digest of the first header octets,
        and the size), C{"message-id"} (Message-ID alone, for messages some
        tool altered), or C{"off"} (the state store only).
    @ivar eightBit: what becomes of a message with 8-bit octets (and no
        NUL) when the destination lacks BINARY: C{"literal"} (sent in an
        ordinary literal, which RFC 3501 allows) or C{"fail"} (recorded as
        failed with the reason).
    @ivar folderNameFallback: whether a folder whose name the destination
        refuses is created under a safe spelling (C{folder_name_fallback}).
    """

    name: str
    source: SourceConfig
    destination: DestinationConfig
    connections: int
    pipeline: PipelineConfig
    folders: FolderRules = FolderRules()
    identity: str = "fingerprint"
    eightBit: str = "literal"
    retry: RetryConfig = RetryConfig()
    folderNameFallback: bool = True

    def migrationKey(self) -> tuple[object, ...]:
        """
        What makes two jobs the same migration under two names: the same
        source (an IMAP source's server and user, a local source's path),
        destination account and folder rules.  Two configured jobs never
        share one (the configuration is refused), and a job waits while a
        run of another with its key goes on (a reload renamed it while
        it ran): run at once, both copied the same messages.
        """
        source = self.source
        where = (
            (source.server.name, source.user)
            if isinstance(source, ImapSourceConfig)
            else (type(source).__name__, source.path)
        )
        return (where, self.destination.server.name, self.destination.user, self.folders)


@frozen
class StatusConfig:
    """
    The status web resource.

    @ivar listen: a server endpoint string (C{tcp:8025:interface=127.0.0.1},
        C{ssl:8443:privateKey=KEY:certKey=CERT} for TLS).
    @ivar token: the bearer token that allows the controls
        (C{status.token_file}), or L{None}: the site is read-only.  A
        L{Secret}: its C{repr} hides it.
    @ivar allowedHosts: C{status.allowed_hosts}: the host names the site
        answers to besides IP addresses (and, on loopback, C{localhost}),
        lower-cased, a leading dot for every name under one
        (L{imapmig.status.hostcheck}); empty: any name on a non-loopback
        address.
    @ivar maxJobSeries: C{status.max_job_series}: the most jobs for which
        C{/metrics} gives every job its own series
        (L{imapmig.status.metrics.MAX_JOB_SERIES} by default).
    """

    listen: str
    token: Secret | None = None
    allowedHosts: tuple[str, ...] = ()
    maxJobSeries: int = 10_000


@frozen
class NotifyConfig:
    """
    Where the daemon's notifications go (C{notify}; L{imapmig.daemon.webhook}).

    @ivar webhookURL: C{notify.webhook_url}: notifications are POSTed to
        it as JSON (C{https://}, or C{http://} to loopback).
    @ivar token: C{notify.token_file}'s token, sent as C{Authorization:
        Bearer}, or L{None}: no C{Authorization}.  A L{Secret}.
    @ivar stalledAfter: C{notify.stalled_after}: seconds without a message
        settled while jobs wait or run before a C{stalled} notification,
        or L{None}: none.
    """

    webhookURL: str = field(repr=False)
    token: Secret | None = None
    stalledAfter: float | None = 3600.0


@frozen
class SQLiteState:
    """
    A state database in a SQLite file (C{state: PATH}, the default).

    @ivar path: the file's absolute path.
    """

    path: str

    def describe(self) -> str:
        """
        What C{--check-config} says it uses.
        """
        return f"SQLite database {self.path}"

    def pageName(self) -> None:
        """
        How a page that needs no credential names it: not at all (no page
        shows a path of the host).
        """
        return None


@frozen
class PostgreSQLState:
    """
    A state database in PostgreSQL (C{state: postgresql://USER@HOST:PORT/DBNAME}),
    read by L{imapmig.config.statelocation}.  Never holds a password
    written in the URI: there is none (it is refused).

    @ivar dbname: the database's name.
    @ivar host: the host name, address, or Unix socket directory (an
        absolute path), or L{None}: libpq's default (its socket).
    @ivar port: the port, or L{None}: libpq's default (5432).
    @ivar user: the role, or L{None}: libpq's default (the system user).
    @ivar parameters: the libpq parameters of the URI's query
        (C{sslmode}, C{sslrootcert}, C{connect_timeout}, ...), as given and
        in order, file names made absolute.
    @ivar password: the password of C{state_password_file} or
        C{state_password_credential}, or L{None}: libpq finds one itself
        (C{PGPASSFILE}, C{~/.pgpass}) or needs none (peer, certificate).
    @ivar passwordPath: the file the password was read from, or L{None}.
    @ivar passwordKey: the key that gave the password
        (C{state_password_file} or C{state_password_credential}), which a
        refused password is reported under, or L{None}.
    @ivar allowPlaintext: C{state_allow_plaintext}: an C{sslmode} weaker
        than C{verify-full} toward a host not on this machine was accepted.
    """

    dbname: str
    host: str | None = None
    port: int | None = None
    user: str | None = None
    parameters: tuple[tuple[str, str], ...] = ()
    password: Secret | None = None
    passwordPath: str | None = None
    passwordKey: str | None = None
    allowPlaintext: bool = False

    def parameter(self, name: str) -> str | None:
        """
        The value of the libpq parameter C{name} given in the URI, or
        L{None}.
        """
        return dict(self.parameters).get(name)

    def keywords(self) -> dict[str, str]:
        """
        The libpq connection keywords of this database, as C{psycopg.connect}
        takes them, without the password (give C{password.value} where it
        is sent).
        """
        given = {
            "dbname": self.dbname,
            "host": self.host,
            "port": None if self.port is None else str(self.port),
            "user": self.user,
        }
        return {key: value for key, value in given.items() if value is not None} | dict(
            self.parameters
        )

    def uri(self) -> str:
        """
        The URI again, without any secret: what C{--check-config} and the
        refusals show.
        """
        user = "" if self.user is None else quote(self.user, safe="") + "@"
        host = "" if self.host is None else _uriHost(self.host)
        port = "" if self.port is None else f":{self.port}"
        query = f"?{urlencode(self.parameters, safe='/', quote_via=quote)}" if self.parameters else ""
        return f"postgresql://{user}{host}{port}/{quote(self.dbname, safe='')}{query}"

    def pageName(self) -> str:
        """
        How a page that needs no credential names it: L{shortURI}.
        """
        return self.shortURI()

    def shortURI(self) -> str:
        """
        L{uri} without its parameters (C{postgresql://USER@HOST:PORT/DBNAME}):
        the database as pages that need no credential name it (a
        parameter may name a file of the host).
        """
        return self.uri().partition("?")[0]

    def describe(self) -> str:
        """
        What C{--check-config} says it uses.
        """
        return f"PostgreSQL database {self.uri()}"


def _uriHost(host: str) -> str:
    """
    C{host} as a URI writes it: an IPv6 address in brackets, a socket
    directory percent-encoded.
    """
    if ":" in host and not host.startswith("/"):
        return f"[{host}]"
    return quote(host, safe="")


StateLocation = SQLiteState | PostgreSQLState
"""
Where the state database is (C{state}).
"""


class UserList(Protocol):
    """
    A C{jobs_from} entry kept as written rather than expanded into one job
    per row (a fleet daemon's configuration, L{imapmig.config.loadConfig}
    with C{lazyUserLists}): its rows are read only when asked
    (L{imapmig.config.userrows.LazyUserList} implements it).

    @ivar name: the template's name (C{jobs[N].name}).
    @ivar entry: its place in the configuration (C{jobs[N]}).
    @ivar path: the CSV file's absolute path.
    @ivar fileDigest: the SHA-256 of the file's octets, hexadecimal,
        computed once at parse.
    @ivar settings: what the rows' jobs share (a value object: the
        template, the credentials' users, the file's path), for its digest.
    """

    name: str
    entry: str
    path: str
    fileDigest: str
    settings: object

    def rows(self, taken: Mapping[str, str]) -> Iterator[tuple[JobConfig, dict[str, object]]]:
        """
        Every row's job, with its C{params} (what L{job} rebuilds it from),
        each row checked as a parse checks it.

        @param taken: the job names already used (by the configuration's
            other jobs), each with where.
        @raise ConfigError: the file's problems, once every row is read.
        """

    def job(self, params: Mapping[str, object]) -> JobConfig:
        """
        The job of one row, from the C{params} L{rows} gave.

        @raise ConfigError: the row is no longer valid (a password file
            gone).
        """
MIN_LEASE = 10.0
"""
The shortest lease C{fleet.lease} may give, in seconds: a daemon renews
its lease every twelfth of it (docs/fleet-design.md, "The heartbeat"),
and a shorter one would be lost to a database's checkpoint or a short
network stall.
"""

MAX_LEASE = 600.0
"""
The longest lease C{fleet.lease} may give, in seconds: a dead daemon's
jobs wait that long before another takes them over.
"""


@frozen
class FleetConfig:
    """
    The fleet of daemons sharing a PostgreSQL state (C{fleet}), required
    with one and refused beside a SQLite file.

    @ivar name: C{fleet.name}: the name of the fleet, which the database
        records with its job list; a daemon of another fleet is refused
        there (docs/fleet-design.md, "Fleet membership").
    @ivar lease: C{fleet.lease}: seconds a daemon's claims outlive its
        last heartbeat (L{MIN_LEASE} to L{MAX_LEASE}).
    """

    name: str
    lease: float = 60.0

    def describe(self) -> str:
        """
        What C{--check-config} says of it.
        """
        return f"{self.name} (lease {self.lease:g} s)"


@frozen
class Config:
    """
    The whole configuration.

    @ivar path: the configuration file's absolute path.
    @ivar state: where the state database is (C{state}): a SQLite file, or
        a PostgreSQL database.
    @ivar status: the status resource, or L{None} when disabled.
    @ivar servers: every configured server, in file order.
    @ivar jobs: every job, in file order.
    @ivar stopTimeout: seconds a stopping daemon waits for the replies to
        the messages in flight.
    @ivar maxJobs: jobs running at once (C{max_jobs}).
    @ivar notify: where notifications go (C{notify}), or L{None}: none.
    @ivar userLists: the user lists not expanded into C{jobs} (read with
        C{lazyUserLists}, by a fleet's daemon); else empty, their jobs in
        C{jobs}.
    @ivar fleet: the fleet the daemon belongs to (C{fleet}), given with a
        PostgreSQL state, or L{None}: with a SQLite one.
    """

    path: str
    state: StateLocation
    status: StatusConfig | None
    servers: tuple[ServerConfig, ...]
    jobs: tuple[JobConfig, ...]
    stopTimeout: float = 30.0
    maxJobs: int = 8
    notify: NotifyConfig | None = None
    userLists: tuple[UserList, ...] = ()
    fleet: FleetConfig | None = None

    @property
    def statePath(self) -> str:
        """
        The SQLite state database's absolute path, for what needs the file
        itself (its lock, a read-only copy).

        @raise ConfigError: the state is in PostgreSQL, which has no file
            (one problem naming C{state}).
        """
        if isinstance(self.state, SQLiteState):
            return self.state.path
        raise ConfigError(
            [
                f"{self.path}: state: {self.state.uri()} is a PostgreSQL database,"
                " not a SQLite file: give a SQLite file's path"
            ]
        )

    @property
    def localDirectory(self) -> str:
        """
        The directory of the files this host keeps beside the state (the
        verify report, L{imapmig.status.verifyreport}): the SQLite file's,
        or, with PostgreSQL, the working directory, which the systemd
        units set to their state directory (C{/var/lib/imapmig}).
        """
        if isinstance(self.state, SQLiteState):
            return os.path.dirname(self.state.path)
        return os.getcwd()
