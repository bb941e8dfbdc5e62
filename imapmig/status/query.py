# -*- test-case-name: tests.test_status_api -*-
"""
The query of C{/status.json} and of a job's failures: parsed once into a
frozen value, every problem an L{HTTPProblem} naming the parameter; and
the selection of one page of jobs by it.

    offset=0 limit=100 state=running,failed q=text sort=-progress errors=1
"""

from __future__ import annotations

import base64
import json
import re
from typing import AbstractSet, Callable, Mapping, Sequence

from attrs import frozen
from twisted.web import http

from imapmig.progress import JobProgress
from imapmig.errors import HTTPProblem
from imapmig.status.progressview import SORT_NAMES, ProgressView

__all__ = [
    "FailureQuery",
    "JobQuery",
    "MAX_LIMIT",
    "MAX_QUERY_OCTETS",
    "encodeCursor",
    "matchingJobs",
    "parseFailureQuery",
    "parseJobQuery",
    "selectJobs",
]

MAX_LIMIT = 500
"""
The largest page (C{limit=}).
"""

MAX_QUERY_OCTETS = 4096
"""
The longest query string answered; a longer one is refused with 414.
"""

_MAX_PARAMETERS = 32
_MAX_OFFSET = 10**9
_MAX_TEXT = 256
_MAX_CURSOR = 2048
# A whole number as a parameter gives it: up to 10 ASCII digits.
_DIGITS = re.compile(r"[0-9]{1,10}")

_Arguments = Mapping[bytes, Sequence[bytes]]


@frozen
class JobQuery:
    """
    What page of which jobs C{/status.json} shows.

    @ivar offset: how many matching jobs to skip.
    @ivar limit: the most jobs on the page.
    @ivar states: only jobs in one of these states (values of
        L{imapmig.progress.JobState}); all when empty.
    @ivar text: only jobs whose name holds this, ignoring case.
    @ivar sort: C{"order"} (the configuration's), or one of L{SORT_NAMES}.
    @ivar descending: sort the other way (C{sort=-name}).
    @ivar errorsOnly: only jobs that failed or have failed messages.
    """

    offset: int = 0
    limit: int = 100
    states: tuple[str, ...] = ()
    text: str = ""
    sort: str = "order"
    descending: bool = False
    errorsOnly: bool = False

    def describe(self, matched: int) -> dict[str, object]:
        """
        The contract's C{page} object for this query, which matched
        C{matched} jobs.
        """
        return {
            "offset": self.offset,
            "limit": self.limit,
            "matched": matched,
            "sort": ("-" if self.descending else "") + self.sort,
            "state": list(self.states),
            "q": self.text,
            "errors": self.errorsOnly,
        }


@frozen
class FailureQuery:
    """
    What page of a job's failed messages to show.

    @ivar offset: how many matching failures to skip.
    @ivar limit: the most on the page.
    @ivar text: only failures holding this (see
        L{imapmig.state.IStateStore.failuresPage}).
    @ivar after: start after this C{(folderKey, messageKey)}: the
        previous page's C{next} (C{after=}).
    """

    offset: int = 0
    limit: int = 50
    text: str = ""
    after: tuple[str, str] | None = None

    def describe(
        self, matched: int, exact: bool = True, next: tuple[str, str] | None = None
    ) -> dict[str, object]:
        """
        The contract's page fields (without C{items}).

        @param exact: whether C{matched} is exact, or a lower bound (see
            L{imapmig.state.FailuresPage.matchedExact}).
        @param next: where the next page starts (L{None}: none follows).
        """
        return {
            "offset": self.offset,
            "limit": self.limit,
            "matched": matched,
            "matched_exact": exact,
            "q": self.text,
            "after": None if self.after is None else encodeCursor(self.after),
            "next": None if next is None else encodeCursor(next),
        }


def encodeCursor(key: tuple[str, str]) -> str:
    """
    The opaque C{after}/C{next} value of a failure page that starts after
    C{key} (C{(folderKey, messageKey)}): base64url of its JSON.
    """
    raw = json.dumps(list(key), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _cursor(arguments: _Arguments, name: str) -> tuple[str, str] | None:
    """
    The key C{name} (an L{encodeCursor} value) stands for, or L{None} if
    absent.
    """
    value = (_single(arguments, name) or "").strip()
    if not value:
        return None
    match _decodeCursor(value) if len(value) <= _MAX_CURSOR else None:
        case [str() as folderKey, str() as messageKey]:
            return (folderKey, messageKey)
    raise _bad(f"{name}: not a page's 'next' value")


def _decodeCursor(value: str) -> object:
    """
    The JSON value of an L{encodeCursor} value; L{None} if it holds none.
    """
    try:
        return json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (ValueError, TypeError):
        return None


def _bad(message: str) -> HTTPProblem:
    return HTTPProblem(http.BAD_REQUEST, message)


def _checkSize(uri: bytes, arguments: _Arguments) -> None:
    """
    Refuse a query string longer than L{MAX_QUERY_OCTETS} (414) or with
    more than a few dozen parameters (400).
    """
    _, _, query = uri.partition(b"?")
    if len(query) > MAX_QUERY_OCTETS:
        raise HTTPProblem(
            http.REQUEST_URI_TOO_LONG,
            f"the query string is {len(query)} octets; at most {MAX_QUERY_OCTETS} are accepted",
        )
    if sum(len(values) for values in arguments.values()) > _MAX_PARAMETERS:
        raise _bad(f"too many query parameters; at most {_MAX_PARAMETERS} are accepted")


def _single(arguments: _Arguments, name: str) -> str | None:
    """
    The one value of parameter C{name}, decoded, or L{None} if absent.

    @raise HTTPProblem: given more than once, or not UTF-8.
    """
    values = arguments.get(name.encode("ascii"))
    if not values:
        return None
    if len(values) > 1:
        raise _bad(f"{name}: given {len(values)} times; give it once")
    try:
        return values[0].decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(f"{name}: not UTF-8") from None


def _number(arguments: _Arguments, name: str, default: int, low: int, high: int) -> int:
    """
    The integer value of C{name}, between C{low} and C{high}.
    """
    value = _single(arguments, name)
    if not value:
        return default
    if not _DIGITS.fullmatch(value):
        raise _bad(f"{name}: {value[:20]!r} is not a whole number from {low} to {high}")
    number = int(value)
    if not low <= number <= high:
        raise _bad(f"{name}: {number} is not from {low} to {high}")
    return number


def _text(arguments: _Arguments, name: str) -> str:
    """
    The text of C{name}, stripped; C{""} if absent.
    """
    value = (_single(arguments, name) or "").strip()
    if len(value) > _MAX_TEXT:
        raise _bad(f"{name}: longer than {_MAX_TEXT} characters")
    return value


def _flag(arguments: _Arguments, name: str) -> bool:
    """
    The truth of C{name}: C{1}/C{true}/C{yes}, C{0}/C{false}/C{no} or empty.
    """
    value = (_single(arguments, name) or "").strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("", "0", "false", "no"):
        return False
    raise _bad(f"{name}: {value[:20]!r} is not 1 or 0")


def parseJobQuery(uri: bytes, arguments: _Arguments, states: AbstractSet[str]) -> JobQuery:
    """
    The L{JobQuery} of a request for C{/status.json}.  Parameters other
    than the query's are ignored.

    @param uri: the request's URI (for the length of its query string).
    @param arguments: its parsed query (C{request.args}).
    @param states: the job states C{state=} may name.

    @raise HTTPProblem: 414 for a query string too long; 400 for too many
        parameters, or a value out of range, naming the parameter.
    """
    _checkSize(uri, arguments)
    sort, descending = _sort(arguments)
    wanted = _states(arguments, states)
    return JobQuery(
        offset=_number(arguments, "offset", 0, 0, _MAX_OFFSET),
        limit=_number(arguments, "limit", 100, 1, MAX_LIMIT),
        states=wanted,
        text=_text(arguments, "q"),
        sort=sort,
        descending=descending,
        errorsOnly=_flag(arguments, "errors"),
    )


def _sort(arguments: _Arguments) -> tuple[str, bool]:
    """
    The order C{sort=} names (C{order} if absent), and whether it is
    reversed (C{sort=-name}).
    """
    sort = _text(arguments, "sort") or "order"
    descending = sort.startswith("-")
    sort = sort.lstrip("-")
    if sort != "order" and sort not in SORT_NAMES:
        raise _bad(f"sort: {sort[:20]!r} is not one of order, {', '.join(SORT_NAMES)}")
    return sort, descending


def _states(arguments: _Arguments, states: AbstractSet[str]) -> tuple[str, ...]:
    """
    The states C{state=} names, separated by commas, each once, in the
    order given; each one of C{states}.
    """
    wanted = tuple(s.strip() for s in _text(arguments, "state").split(",") if s.strip())
    unknown = [s for s in wanted if s not in states]
    if unknown:
        raise _bad(f"state: {unknown[0][:20]!r} is not one of {', '.join(sorted(states))}")
    return tuple(dict.fromkeys(wanted))


def parseFailureQuery(uri: bytes, arguments: _Arguments, defaultLimit: int = 50) -> FailureQuery:
    """
    The L{FailureQuery} of a request for a job's failures.

    @raise HTTPProblem: as L{parseJobQuery}.
    """
    _checkSize(uri, arguments)
    return FailureQuery(
        offset=_number(arguments, "offset", 0, 0, _MAX_OFFSET),
        limit=_number(arguments, "limit", defaultLimit, 1, MAX_LIMIT),
        text=_text(arguments, "q"),
        after=_cursor(arguments, "after"),
    )


def selectJobs(
    view: ProgressView, jobs: Sequence[JobProgress], query: JobQuery
) -> tuple[int, list[JobProgress]]:
    """
    The jobs of C{jobs} (in configuration order) that C{query} matches,
    sorted as it asks: how many, and its page of them.  Reads a few
    attributes of each job, never a snapshot: only the page's jobs are
    rendered.
    """
    selected = matchingJobs(view, jobs, query)
    if query.sort != "order":
        selected = _sorted(selected, view.sortKey(query.sort), query.descending)
    elif query.descending:
        selected = list(reversed(selected))
    return len(selected), list(selected[query.offset : query.offset + query.limit])


def matchingJobs(
    view: ProgressView, jobs: Sequence[JobProgress], query: JobQuery
) -> Sequence[JobProgress]:
    """
    The jobs of C{jobs} that C{query}'s C{state}, C{q} and C{errors}
    select, in their order (for a page, L{selectJobs}; for a bulk control,
    L{imapmig.status.controls}).
    """
    selected: Sequence[JobProgress] = jobs
    if query.states:
        selected = _inStates(view, selected, frozenset(query.states))
    if query.text:
        selected = _named(view, selected, query.text.casefold())
    if query.errorsOnly:
        selected = _withErrors(view, selected)
    return selected


def _inStates(
    view: ProgressView, jobs: Sequence[JobProgress], wanted: AbstractSet[str]
) -> list[JobProgress]:
    """
    The jobs of C{jobs} in one of the states C{wanted}.
    """
    stateOf = view.stateOf
    return [job for job in jobs if stateOf(job) in wanted]


def _named(view: ProgressView, jobs: Sequence[JobProgress], needle: str) -> list[JobProgress]:
    """
    The jobs of C{jobs} whose name holds C{needle}, ignoring case
    (C{needle} is case-folded).
    """
    nameOf = view.nameOf
    return [job for job in jobs if needle in nameOf(job).casefold()]


def _withErrors(view: ProgressView, jobs: Sequence[JobProgress]) -> list[JobProgress]:
    """
    The jobs of C{jobs} that failed or have failed messages.
    """
    hasErrors = view.hasErrors
    return [job for job in jobs if hasErrors(job)]


def _sorted(
    jobs: Sequence[JobProgress], key: Callable[[JobProgress], object | None], descending: bool
) -> list[JobProgress]:
    """
    C{jobs} sorted by C{key}, ties in configuration order, jobs without a
    value last.
    """
    keyed = [(key(job), job) for job in jobs]
    valued = [(k, job) for k, job in keyed if k is not None]
    valued.sort(key=lambda pair: pair[0], reverse=descending)  # type: ignore[arg-type,return-value]
    return [job for _, job in valued] + [job for k, job in keyed if k is None]
