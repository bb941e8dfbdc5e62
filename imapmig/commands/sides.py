# -*- test-case-name: tests.test_commands_plan_integration, tests.test_cli -*-
"""
A job's two sides opened for a command, as the daemon opens them: the
source, and the opener of logged-in sessions to the destination.  One
place for C{imapmig plan} and C{imapmig verify}, which each had a copy.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Sequence

from imapmig.config import Config, JobConfig
from imapmig.daemon.service import destinationOpener, sourceFor
from imapmig.imap.session import IMAPSession
from imapmig.oauth.tokens import TokenSources
from imapmig.sources import IMessageSource
from imapmig.sources.imap import IMAPSource

DestinationOpener = Callable[[], Awaitable[IMAPSession]]


PAGE = 500
"""
The jobs whose records C{plan} and C{verify} read from the state store
at once (L{IStateStore.jobReports<imapmig.state.IStateStore.jobReports>}),
as C{imapmig report} does.
"""


def selectedPages(config: Config, names: Sequence[str]) -> Iterator[list[JobConfig]]:
    """
    The jobs of C{config} named in C{names}, in the configuration's order,
    a list of at most L{PAGE} at a time.  (C{names} is looked in as a
    set: a list of a fleet's 50,000 names took 1.25 billion comparisons.)
    """
    wanted = frozenset(names)
    page: list[JobConfig] = []
    for job in config.jobs:
        if job.name in wanted:
            page.append(job)
        if len(page) == PAGE:
            yield page
            page = []
    if page:
        yield page


@asynccontextmanager
async def jobSides(
    job: JobConfig, reactor: Any, tokens: TokenSources
) -> AsyncIterator[tuple[IMessageSource, DestinationOpener]]:
    """
    Open C{job}'s source and destination opener; close an IMAP source's
    connection on the way out.

    @param tokens: the command's one refresh-token cache per file.
    """
    openDestination = destinationOpener(job, reactor, tokens=tokens)
    source = sourceFor(job, reactor, tokens=tokens)
    try:
        yield source, openDestination
    finally:
        if isinstance(source, IMAPSource):
            await source.close()
