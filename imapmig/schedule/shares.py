# -*- test-case-name: tests.test_schedule_shares -*-
"""
A fleet's shares of each server's C{max_connections}: the limit one
daemon applies to its own connection grants so that the live daemons
together stay within the server's (docs/fleet-design.md, "C{max_connections}
across the fleet").

With C{n} live daemons sorted by id and this one at rank C{r}, its share
of a server's C{max} is C{max // n}, one more if C{r < max % n}, and never
more than C{max} less the connections the other daemons reported in use
there at their last heartbeat (never below 0).  A daemon that does not see
itself live (its lease is stale) has no share of any limited server; a
server without C{max_connections} has no share to compute and stays
unlimited.  A share is applied as a limit that changes at run time is
(L{imapmig.schedule.grants.ConnectionGrants.setShares}): a lower one cuts
no connection, a higher one grants the waiters at once.

The fleet's scheduler makes one call per heartbeat::

    shares = FleetShares(grants)            # once, beside the grants
    ...
    withoutShare = shares.apply(heartbeat, me)   # each heartbeat

C{withoutShare} (also L{FleetShares.withoutShare}) names the servers where
this daemon has no share: its claims skip the jobs using them.  What the
daemon reports in its own heartbeat is L{FleetShares.inUse}.

New: a daemon alone needs none of it, and the grants (which know nothing
of a fleet) only apply the caps computed here.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from imapmig.queue import Heartbeat, LiveDaemon
from imapmig.schedule.grants import ConnectionGrants

__all__ = ["FleetShares", "fairShares"]


def fairShares(
    maxima: Mapping[str, int], live: Iterable[LiveDaemon], me: str
) -> dict[str, int]:
    """
    The share of each server's C{max_connections} of the daemon C{me}.

    @param maxima: each limited server's C{max_connections}.
    @param live: the live daemons, this one among them (in any order).
    @param me: this daemon's id.
    @return: by server of C{maxima}, this daemon's share.
    """
    daemons = sorted(live, key=lambda daemon: daemon.daemonId)
    ids = [daemon.daemonId for daemon in daemons]
    if me not in ids:
        return dict.fromkeys(maxima, 0)
    rank, count = ids.index(me), len(ids)
    others: dict[str, int] = {}
    for daemon in daemons:
        if daemon.daemonId != me:
            for server, connections in daemon.connections:
                others[server] = others.get(server, 0) + max(0, connections)
    shares = {}
    for server, maximum in maxima.items():
        fair = maximum // count + (1 if rank < maximum % count else 0)
        shares[server] = max(0, min(fair, maximum - others.get(server, 0)))
    return shares


class FleetShares:
    """
    This daemon's shares of the servers' C{max_connections}, applied to
    its grants at each heartbeat.

    @ivar withoutShare: the servers where the last heartbeat gave this
        daemon no share (before the first: none).
    """

    def __init__(self, grants: ConnectionGrants) -> None:
        """
        @param grants: the daemon's grants, whose configured
            C{max_connections} (as of the last reload) are shared.
        """
        self._grants = grants
        self.withoutShare: frozenset[str] = frozenset()

    def apply(self, heartbeat: Heartbeat, me: str) -> frozenset[str]:
        """
        Cap this daemon's connections at its shares among the live daemons
        C{heartbeat} brought back.

        @param me: this daemon's id.
        @return: the servers where it has no share (L{withoutShare}).
        """
        shares = fairShares(self._grants.maxConnections(), heartbeat.live, me)
        self._grants.setShares(shares)
        self.withoutShare = frozenset(server for server, share in shares.items() if share == 0)
        return self.withoutShare

    def inUse(self) -> tuple[tuple[str, int], ...]:
        """
        The connections this daemon holds per server, as its heartbeat
        reports them (L{LiveDaemon.connections}: sorted by server).
        """
        return tuple(sorted(self._grants.connectionsByServer().items()))
