# -*- test-case-name: tests.test_schedule_grants -*-
"""
Grants: what bounds the jobs running at once (C{max_jobs}) and the
connections each server (C{max_connections}) and each account on it
(C{per_account.max_connections}) sees from every job together.

L{GrantPools} holds counting pools and grants a I{demand} (so many units
of so many pools) only when every pool it names has room, taking them all
at once: nothing is held while waiting for the rest, so two requests
never deadlock on each other.  Waiting requests are served oldest first:
when units come back, the oldest waiter that now fits is granted, and a
waiter that still does not fit keeps what it needs from being taken by
younger ones (no starvation).  Cancelling a waiting request's Deferred
(its job stopped) removes it.  A grant is released once; releasing again
does nothing.

L{ConnectionGrants} names the pools: one job-slot pool, and per server a
connection pool and one pool per account (server, user).  A connection to
C{user} at C{server} takes one unit of the server's pool and one of the
account's, in that fixed order; a job copying between two accounts of one
server takes two units of the server's pool.

L{JobConnections} is one job's share: before the job starts, its
essential connections (its first destination connection and, for an IMAP
source, its first source connection) are granted together and kept for
the whole run, so that it can always open them again (after a lost
connection) whatever the other jobs hold.  Its other connections are
granted one at a time while it runs, and go back to the pools when their
connection closes.

The limits may change while the daemon runs (a reload:
L{ConnectionGrants.setLimits}).  A lower limit never cuts a connection or
takes back a job slot: what is granted stays granted, and new grants wait
until the units in use are below the new limit; a higher one grants the
waiters that now fit at once.  A waiter whose demand no longer fits
under a lowered limit at all fails with L{GrantImpossible}.

In a fleet, each server's C{max_connections} is shared among the live
daemons (L{imapmig.schedule.shares}): L{ConnectionGrants.setShares} caps a
server's pool at this daemon's share, applied as a lowered or raised limit
is, except that a share never makes a demand impossible: a share smaller
than a demand (0 included) makes it wait for a larger share, since the
share changes with every heartbeat while the configured limit does not.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Hashable, Iterable, Mapping, Protocol, cast

from twisted.internet.defer import Deferred, fail, succeed

from imapmig.config.limits import ServerLimits
from imapmig.errors import ConnectionNotGranted, GrantImpossible
from imapmig.progress.telemetry import ServerConnections

PoolKey = Hashable


class IGrant(Protocol):
    """
    What every grant offers: L{Grant}, and a job's lent essential
    connection.
    """

    def release(self) -> None:
        """
        Give the units back; at most once, later calls do nothing.
        """


class Grant:
    """
    Units of some pools, held until L{release}.

    @ivar demand: how many units of which pools.
    """

    def __init__(self, pools: GrantPools, demand: Mapping[PoolKey, int]) -> None:
        self._pools = pools
        self.demand = dict(demand)
        self.released = False

    def release(self) -> None:
        """
        Give the units back to their pools (in reverse order of taking);
        the oldest waiters that now fit are granted.
        """
        if self.released:
            return
        self.released = True
        self._pools._give(self.demand)


class _Waiter:
    """
    A request waiting for its units.
    """

    def __init__(self, pools: GrantPools, demand: Mapping[PoolKey, int]) -> None:
        self.pools = pools
        self.demand = demand
        self.deferred: Deferred[Grant] = Deferred(self._cancel)

    def _cancel(self, deferred: Deferred[Grant]) -> None:
        self.pools._withdraw(self)


class GrantPools:
    """
    Counting pools with all-or-nothing, first-come-first-served grants.
    """

    def __init__(
        self,
        limitOf: Callable[[PoolKey], int | None],
        capOf: Callable[[PoolKey], int | None] | None = None,
    ) -> None:
        """
        @param limitOf: the limit of a pool, by its key; L{None} for no
            limit.  A demand above it is impossible.
        @param capOf: what may be granted of a pool now, at most its limit
            (a fleet's share of it), by its key; L{None} for no cap.  A
            demand above it waits.  By default, the limit.
        """
        self._limitOf = limitOf
        self._capOf = limitOf if capOf is None else capOf
        self._used: Counter[PoolKey] = Counter()
        self._waiters: list[_Waiter] = []

    def inUse(self, key: PoolKey) -> int:
        """
        The units of pool C{key} granted and not yet released.
        """
        return self._used[key]

    def usage(self) -> dict[PoolKey, int]:
        """
        The units granted and not yet released, by pool (pools with none
        left out).
        """
        return dict(self._used)

    @property
    def waiting(self) -> int:
        """
        How many requests wait.
        """
        return len(self._waiters)

    def limit(self, key: PoolKey) -> int | None:
        """
        The limit of pool C{key}, or L{None} for none.
        """
        return self._limitOf(key)

    def acquire(self, demand: Mapping[PoolKey, int]) -> Deferred[Grant]:
        """
        Grant C{demand} once every pool it names has room and no older
        request is owed those units.

        @return: fires with the L{Grant}; cancel it to give up waiting.
            Fails at once with L{GrantImpossible} if a pool's limit is below
            what C{demand} asks of it.
        """
        impossible = self._impossible(demand)
        if impossible is not None:
            return fail(GrantImpossible(impossible))
        waiter = _Waiter(self, demand)
        self._waiters.append(waiter)
        self._dispatch()
        return waiter.deferred

    def tryAcquire(self, demand: Mapping[PoolKey, int]) -> Grant | None:
        """
        Grant C{demand} now if it fits without taking units owed to a
        waiting request; L{None} otherwise.  Only waiters on the pools
        C{demand} names matter: one waiting for a job slot does not keep a
        connection from being granted.
        """
        if self._impossible(demand) is not None:
            return None
        if not self._fits(demand, self._owed()):
            return None
        return self._take(demand)

    def _owed(self) -> Counter[PoolKey]:
        """
        What the waiters are owed: every waiter's demand (each waits
        because it does not fit, L{_dispatch} having granted those that
        do).
        """
        owed: Counter[PoolKey] = Counter()
        for waiter in self._waiters:
            owed.update(waiter.demand)
        return owed

    def _impossible(self, demand: Mapping[PoolKey, int]) -> str | None:
        for key, count in demand.items():
            limit = self._limitOf(key)
            if limit is not None and count > limit:
                return f"needs {count} units of {key!r} at once, whose limit is {limit}"
        return None

    def _fits(self, demand: Mapping[PoolKey, int], owed: Counter[PoolKey]) -> bool:
        for key, count in demand.items():
            limit = self._capOf(key)
            if limit is not None and self._used[key] + owed[key] + count > limit:
                return False
        return True

    def _take(self, demand: Mapping[PoolKey, int]) -> Grant:
        for key, count in demand.items():
            self._used[key] += count
        return Grant(self, demand)

    def _give(self, demand: Mapping[PoolKey, int]) -> None:
        for key in reversed(list(demand)):
            self._used[key] -= demand[key]
            if not self._used[key]:
                del self._used[key]
        self._dispatch()

    def _withdraw(self, waiter: _Waiter) -> None:
        """
        A waiter gave up: what it was owed may now go to younger ones.
        """
        if waiter in self._waiters:
            self._waiters.remove(waiter)
            self._dispatch()

    def limitsChanged(self) -> None:
        """
        The limits C{limitOf} gives have changed: fail the waiters whose
        demand they can never grant now (L{GrantImpossible}), and grant
        those that now fit.  Units granted beyond a lowered limit stay
        granted; no new ones are until the use is below it.
        """
        hopeless: list[tuple[_Waiter, str]] = []
        for waiter in list(self._waiters):
            impossible = self._impossible(waiter.demand)
            if impossible is not None:
                self._waiters.remove(waiter)
                hopeless.append((waiter, impossible))
        self._dispatch()
        for waiter, why in hopeless:
            waiter.deferred.errback(GrantImpossible(why))

    def _dispatch(self) -> None:
        """
        Grant the waiters that fit, oldest first; a waiter that does not
        fit is owed its units, which younger waiters may not take.
        """
        owed: Counter[PoolKey] = Counter()
        granted: list[tuple[_Waiter, Grant]] = []
        for waiter in list(self._waiters):
            if self._fits(waiter.demand, owed):
                self._waiters.remove(waiter)
                granted.append((waiter, self._take(waiter.demand)))
            else:
                owed.update(waiter.demand)
        # Fired after the walk: a callback may release or acquire.
        for waiter, grant in granted:
            waiter.deferred.callback(grant)


JOB_SLOTS = ("jobs",)


def serverPool(server: str) -> tuple[str, str]:
    """
    The key of server C{server}'s connection pool.
    """
    return ("server", server)


def accountPool(server: str, user: str) -> tuple[str, str, str]:
    """
    The key of the connection pool of C{user} at C{server}.
    """
    return ("account", server, user)


def connectionDemand(connections: Iterable[tuple[str, str]]) -> dict[PoolKey, int]:
    """
    What the connections C{(server, user)} take together: per connection
    one unit of its server's pool then one of its account's.
    """
    demand: dict[PoolKey, int] = {}
    for server, user in connections:
        for key in (serverPool(server), accountPool(server, user)):
            demand[key] = demand.get(key, 0) + 1
    return demand


class ConnectionGrants:
    """
    The daemon's pools: job slots, and connections per server and per
    account.
    """

    def __init__(self, maxJobs: int, limits: Mapping[str, ServerLimits]) -> None:
        """
        @param maxJobs: jobs running at once.
        @param limits: each server's limits, by server name; a server not
            named has none.
        """
        self._maxJobs = maxJobs
        self._limits = dict(limits)
        # Per server, this daemon's share of its max_connections in a fleet.
        self._shares: dict[str, int] = {}
        self.pools = GrantPools(self._limitOf, self._capOf)
        # Per server, the units the running jobs keep reserved for their
        # essential connections and no session holds now.
        self._idle: Counter[str] = Counter()

    def _limitOf(self, key: PoolKey) -> int | None:
        if key == JOB_SLOTS:
            return self._maxJobs
        assert isinstance(key, tuple)
        limits = self._limits.get(key[1])
        if limits is None:
            return None
        if key[0] == "server":
            return limits.maxConnections
        return limits.perAccount.maxConnections

    def _capOf(self, key: PoolKey) -> int | None:
        limit = self._limitOf(key)
        assert isinstance(key, tuple)
        if key[0] != "server":
            return limit
        share = self._shares.get(key[1])
        if share is None:
            return limit
        return share if limit is None else min(share, limit)

    @property
    def maxJobs(self) -> int:
        """
        The jobs that may run at once.
        """
        return self._maxJobs

    def limitsOf(self, server: str) -> ServerLimits | None:
        """
        The limits of server C{server}, or L{None} if it has none.
        """
        return self._limits.get(server)

    def setLimits(self, maxJobs: int, limits: Mapping[str, ServerLimits]) -> None:
        """
        Apply new limits (a reload): see the module's docstring.

        @param maxJobs: jobs running at once from now on.
        @param limits: each server's limits, by server name.
        """
        self._maxJobs = maxJobs
        self._limits = dict(limits)
        self.pools.limitsChanged()

    def setShares(self, shares: Mapping[str, int]) -> None:
        """
        Cap each server's connections at this daemon's share of its
        C{max_connections} among a fleet's live daemons (the previous
        shares are replaced; a server not named has no cap but its
        limit).  As L{setLimits}, a lower share cuts nothing and a higher
        one grants the waiters that now fit; unlike it, a demand above a
        share waits instead of failing.
        """
        self._shares = dict(shares)
        self.pools.limitsChanged()

    def maxConnections(self) -> dict[str, int]:
        """
        The configured C{max_connections} of each server that has one (not
        this daemon's share of it).
        """
        return {
            server: limits.maxConnections
            for server, limits in self._limits.items()
            if limits.maxConnections is not None
        }

    def connectionsByServer(self) -> dict[str, int]:
        """
        The connections granted per server (open, or kept reserved for a
        running job's essential connections), for the servers with any:
        what this daemon holds of each server's C{max_connections}.
        """
        return {
            key[1]: count
            for key, count in self.pools.usage().items()
            if isinstance(key, tuple) and key[0] == "server"
        }

    def jobSlot(self) -> Deferred[Grant]:
        """
        A job slot, once fewer than C{maxJobs} jobs hold one.
        """
        return self.pools.acquire({JOB_SLOTS: 1})

    def connections(self, connections: Iterable[tuple[str, str]]) -> Deferred[Grant]:
        """
        Connections C{(server, user)}, granted together.
        """
        return self.pools.acquire(connectionDemand(connections))

    def connectionsInUse(self, server: str, user: str | None = None) -> int:
        """
        Connections granted to C{server} (to C{user} there, if given).
        """
        if user is None:
            return self.pools.inUse(serverPool(server))
        return self.pools.inUse(accountPool(server, user))

    def connectionCounts(self) -> dict[str, ServerConnections]:
        """
        The connections granted and open per server: every server named in
        the limits given (the service names every configured server).
        """
        servers = dict.fromkeys(self._limits)
        servers.update(dict.fromkeys(self._idle))
        counts = {}
        for server in servers:
            granted = self.pools.inUse(serverPool(server))
            limits = self._limits.get(server)
            counts[server] = ServerConnections(
                granted,
                granted - self._idle[server],
                None if limits is None else limits.maxConnections,
            )
        return counts

    def _idled(self, key: tuple[str, str], units: int) -> None:
        """
        C{units} more (or fewer) of a job's essential connections to
        C{key} are reserved and held by no session.
        """
        server = key[0]
        self._idle[server] += units
        if not self._idle[server]:
            del self._idle[server]


class _Lent:
    """
    One of a job's essential connections, lent to a session: released, it
    goes back to the job, not to the pools.
    """

    def __init__(self, owner: JobConnections, key: tuple[str, str]) -> None:
        self._owner = owner
        self._key = key
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._owner._returned(self._key)


class JobConnections:
    """
    One job's connection grants: its essential connections, reserved for
    its whole run, and its extra ones, granted as they come free.
    """

    def __init__(
        self, grants: ConnectionGrants, essential: Iterable[tuple[str, str]]
    ) -> None:
        """
        @param essential: the connections C{(server, user)} the job cannot
            start without (its first destination connection, its first
            source connection).
        """
        self._grants = grants
        self._essential = list(essential)
        self._spare: Counter[tuple[str, str]] = Counter()
        self._reserved: Grant | None = None
        self._lent = 0
        self._ended = False

    def reserve(self) -> Deferred[None]:
        """
        Wait until the essential connections are granted (together).
        Cancel it to give up (the job was stopped meanwhile).

        @return: fires once granted; fails with L{GrantImpossible} if the
            limits can never grant them.
        """
        reserving = self._grants.connections(self._essential)

        def reserved(grant: Grant) -> None:
            if self._ended:
                grant.release()
                return
            self._reserved = grant
            self._spare.update(self._essential)
            for key in self._essential:
                self._grants._idled(key, 1)

        return reserving.addCallback(reserved)

    def grantFor(self, server: str, user: str, wait: bool) -> Callable[[], Deferred[IGrant]]:
        """
        What a session opener for C{user} at C{server} calls before it
        connects: a spare essential connection if there is one, else an
        extra connection from the pools.

        @param wait: whether to wait for an extra connection; without,
            one not grantable now fails with L{ConnectionNotGranted}.
        """
        key = (server, user)

        def obtain() -> Deferred[IGrant]:
            if self._spare[key] > 0:
                self._spare[key] -= 1
                self._grants._idled(key, -1)
                self._lent += 1
                return succeed(cast(IGrant, _Lent(self, key)))
            hopeless = self._ownLimit(key)
            if hopeless is not None:
                return fail(ConnectionNotGranted(hopeless))
            demand = connectionDemand([key])
            if not wait:
                grant = self._grants.pools.tryAcquire(demand)
                if grant is None:
                    return fail(
                        ConnectionNotGranted(
                            f"no connection to {user} at {server} granted now:"
                            " the servers' connection limits are taken"
                        )
                    )
                return succeed(cast(IGrant, grant))
            return cast("Deferred[IGrant]", self._grants.pools.acquire(demand))

        return obtain

    def _ownLimit(self, key: tuple[str, str]) -> str | None:
        """
        Why one more connection for C{key} can never be granted while this
        job holds its essential ones, or L{None}.
        """
        server, user = key
        own = connectionDemand(self._essential)
        for pool, what in (
            (serverPool(server), f"max_connections of server {server}"),
            (accountPool(server, user), f"per_account.max_connections of {user} at {server}"),
        ):
            limit = self._grants.pools.limit(pool)
            if limit is not None and own.get(pool, 0) + 1 > limit:
                return f"the {what} ({limit}) is taken by this job's own connections"
        return None

    def _returned(self, key: tuple[str, str]) -> None:
        self._lent -= 1
        self._spare[key] += 1
        self._grants._idled(key, 1)
        self._releaseIfDone()

    def end(self) -> None:
        """
        The job's run is over: its essential connections go back to the
        pools once every session using one has closed.
        """
        self._ended = True
        self._releaseIfDone()

    def _releaseIfDone(self) -> None:
        if self._ended and self._lent == 0 and self._reserved is not None:
            reserved, self._reserved = self._reserved, None
            for key, units in self._spare.items():
                self._grants._idled(key, -units)
            self._spare.clear()
            reserved.release()
