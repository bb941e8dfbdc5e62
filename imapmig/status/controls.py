# -*- test-case-name: tests.test_controls_resource -*-
"""
C{/control}: the admin's controls over the jobs, as POST requests.

    POST /control/jobs/NAME/pause | resume | retry-failed | cancel
    POST /control/pause-all | resume-all
    POST /control/bulk/ACTION/preview   {"state": [...], "q": ..., "errors": ...}
    POST /control/bulk/ACTION           the same, with "count" and "selection"

Each is allowed only with C{Authorization: Bearer TOKEN}, TOKEN being the
content of C{status.token_file}, compared in constant time; without a
configured token every request is refused (403): the site is read-only.
The bearer token, which a browser never sends on its own, is the defence
against cross-site requests; three checks back it up, each refused with
403: the request must say C{Content-Type: application/json} (a form
cannot), its C{Origin}, if any, must be the site's own, and its
C{Sec-Fetch-Site}, if any, C{same-origin} or C{none}.  No CORS header is
ever sent, so a browser lets no other origin read an answer or send the
preflight's follow-up.  The body (empty, or a JSON object, whose members
are ignored) may not exceed L{MAX_BODY} octets.

A bulk control (ACTION one of pause, resume, retry-failed, cancel)
applies to the jobs a filter selects, as C{/status.json}'s C{state},
C{q} and C{errors} select them (L{imapmig.status.query}).  Its preview
changes nothing: it answers how many of the selected jobs the control
applies to (C{jobs}) and a digest of their names (C{selection}).  The
control itself must carry both back: it is refused (409) unless the
jobs it would apply to now are exactly those confirmed, and then logs
one line for them all (L{IJobControls.bulk}).

Every answer is JSON: C{{"ok": true, "job": NAME, "state": STATE,
"message": ...}}, or C{{"error": ...}} with 400, 401, 403, 404, 405, 409,
413, 503 or 500.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import AbstractSet, Callable, Sequence
from urllib.parse import unquote_to_bytes, urlsplit

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from imapmig.errors import ControlRefused, HTTPProblem, ImapmigError, UnknownJob, escapedExcerpt
from imapmig.progress import JobState, MigrationProgress
from imapmig.schedule.controls import BULK_ACTIONS, IJobControls
from imapmig.access.secrets import Secret
from imapmig.status.progressview import ProgressView
from imapmig.status.query import JobQuery, matchingJobs, parseJobQuery
from imapmig.status.lograte import LineBudget
from imapmig.units import plural

log = Logger()

MAX_BODY = 1024
"""
The largest request body accepted, in octets: a control carries none.
"""

# Each job control: its IJobControls method, and what the answer says
# of the job.
_JOB_ACTIONS = {
    b"pause": ("pause", "job {} paused"),
    b"resume": ("resume", "job {} resumed"),
    b"retry-failed": ("retryFailed", "job {}: what failed is tried again"),
    b"cancel": ("cancel", "job {} cancelled"),
}

# Each control of every job: its IJobControls method, and what the
# answer says of the jobs.
_EVERY_ACTIONS = {
    b"pause-all": ("pauseAll", "paused"),
    b"resume-all": ("resumeAll", "resumed"),
}

_SAME_SITE = (b"same-origin", b"none")

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    """
    C{(scheme, host, port)} of an origin, lower-cased, the default port
    filled in; L{None} if it cannot be one.
    """
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS or not netloc or "@" in netloc:
        return None
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    if parts.hostname is None:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def sameOrigin(request: Request) -> bool:
    """
    Whether C{request}'s C{Origin} header, if any, is the site's own
    origin: its scheme (C{https} on a TLS listener) and its C{Host}
    header.  A request without C{Origin} passes (not a cross-origin
    browser request: browsers send one with every cross-origin POST).
    """
    given = request.getHeader(b"origin")
    if given is None:
        return True
    host = request.getHeader(b"host")
    if host is None:
        return False
    own = _origin("https" if request.isSecure() else "http", host.decode("latin-1"))
    scheme, _, rest = given.decode("latin-1").partition("://")
    if "/" in rest:
        return False
    return own is not None and _origin(scheme, rest) == own


def bearerToken(request: Request) -> bytes | None:
    """
    The token of C{request}'s C{Authorization: Bearer TOKEN} header, or
    L{None}.
    """
    match request.requestHeaders.getRawHeaders(b"authorization"):
        case [header]:
            scheme, _, token = header.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                return token.strip() or None
    return None


def _mediaType(request: Request) -> bytes:
    """
    The media type of C{request}'s C{Content-Type}, lower-cased, without
    parameters.
    """
    value = request.getHeader(b"content-type") or b""
    return value.split(b";", 1)[0].strip().lower()


class ControlResource(Resource):
    """
    C{/control}: a leaf resource that routes the rest of the path itself.
    """

    isLeaf = True

    def __init__(
        self,
        controls: IJobControls,
        token: Secret | None,
        clock: IReactorTime,
        progress: MigrationProgress | None = None,
    ) -> None:
        """
        @param controls: what the requests control (the scheduler).
        @param progress: the jobs a bulk control's filter selects from;
            L{None}: no bulk controls (404).
        @param token: the bearer token (C{status.token_file}'s content);
            L{None} refuses every request.
        @param clock: the reactor: requests refused for their token or
            origin are logged once a minute at most (L{LineBudget}), so
            that whoever tries tokens cannot fill the log.
        """
        super().__init__()  # type: ignore[no-untyped-call]
        self._controls = controls
        self._view = None if progress is None else ProgressView(progress, clock.seconds)
        self._token = None if token is None else token.value.encode("utf-8")
        self._refusals = LineBudget(clock, overdue=self._logRefusals)
        # The latest request refused, for the line that reports a burst of
        # them after it ended: its path, client and reason.
        self._latestRefusal = ("", "", "")

    @property
    def enabled(self) -> bool:
        """
        Whether any control can be allowed: a token is configured.
        """
        return self._token is not None

    def flushRefusals(self) -> None:
        """
        Log the refusals not yet logged now (the site stops listening),
        rather than a minute after the last line.
        """
        self._refusals.flush()

    def render(self, request: Request) -> bytes | int:
        """
        Check the request, then apply its control; answer JSON.
        """
        client = str(getattr(request.getClientAddress(), "host", ""))
        if request.method != b"POST":
            request.responseHeaders.setRawHeaders(b"Allow", [b"POST"])
            return _answer(request, http.NOT_ALLOWED, {"error": "use POST"})
        try:
            self._check(request)
            apply = self._route(request, client)
        except HTTPProblem as e:
            if e.code in (http.UNAUTHORIZED, http.FORBIDDEN):
                self._logRefusal(request, client, e.message)
            return _answer(request, e.code, {"error": e.message})
        finished = [False]
        request.notifyFinish().addBoth(lambda _: finished.__setitem__(0, True))

        def done(body: dict[str, object]) -> None:
            if not finished[0]:
                request.write(_answer(request, http.OK, body))
                request.finish()

        def failed(failure: Failure) -> None:
            error = failure.value
            if isinstance(error, UnknownJob):
                code, message = http.NOT_FOUND, str(error)
            elif isinstance(error, ControlRefused):
                code, message = http.CONFLICT, error.reason
            elif isinstance(error, ImapmigError):
                code, message = http.SERVICE_UNAVAILABLE, str(error)
            else:
                log.failure("Control {path} crashed", failure, path=self._loggedPath(request))
                code, message = http.INTERNAL_SERVER_ERROR, "internal error"
            if not finished[0]:
                request.write(_answer(request, code, {"error": message}))
                request.finish()

        try:
            apply().addCallbacks(done, failed)
        except Exception:
            failed(Failure())
        return NOT_DONE_YET

    def _logRefusal(self, request: Request, client: str, why: str) -> None:
        """
        Log a request refused for its token or origin (or every request,
        when controls are disabled), once a minute at most
        (L{LineBudget}): a warning, or at info level when controls are
        disabled by configuration (read-only: nothing to warn about, but
        whoever sends requests still cannot fill the log).
        """
        self._latestRefusal = (self._loggedPath(request), client, why)
        refused = self._refusals.count()
        if refused is not None:
            self._logRefusals(refused)

    def _loggedPath(self, request: Request) -> str:
        """
        C{request}'s path as the log shows it: without its query string
        (C{?token=...}), and each segment that holds a part of the token
        (8 characters of it or more, percent-encoded or not) shown as
        C{[redacted]}; escaped, cut to 80 octets.
        """
        path = request.path.split(b"?", 1)[0]
        if self._token:
            path = _redacted(path, self._token)
        return escapedExcerpt(path)

    def _logRefusals(self, refused: int) -> None:
        """
        Log C{refused} refusals, naming the latest (L{_logRefusal}).
        """
        path, client, why = self._latestRefusal
        emit = log.info if self._token is None else log.warn
        if refused == 1:
            emit(
                "Control request {path} from {client} refused: {why}",
                path=path,
                client=client,
                why=why,
            )
        elif self._token is None:
            emit(
                "Control request {path} from {client} refused: {why}"
                " ({refused} control requests refused since the last such line;"
                " at most one line a minute)",
                path=path,
                client=client,
                why=why,
                refused=refused,
            )
        else:
            emit(
                "Control request {path} from {client} refused: {why}"
                " ({refused} control requests refused for their token or origin"
                " since the last such line; at most one line a minute)",
                path=path,
                client=client,
                why=why,
                refused=refused,
            )

    def _check(self, request: Request) -> None:
        """
        Refuse a request that is not allowed to control anything: in
        this order, no token configured (403), its body (L{_checkSize}),
        where it comes from (L{_FORBIDDEN}), its token (L{_checkToken}),
        then its body again (L{_jsonBody}).

        @raise HTTPProblem: why not.
        """
        if self._token is None:
            raise HTTPProblem(http.FORBIDDEN, "controls are disabled: no status.token_file")
        _checkSize(request)
        for allowed, why in _FORBIDDEN:
            if not allowed(request):
                raise HTTPProblem(http.FORBIDDEN, why)
        self._checkToken(request, self._token)
        _jsonBody(request)

    def _checkToken(self, request: Request, token: bytes) -> None:
        """
        Refuse a request without C{token} as its bearer token (401),
        saying so in C{WWW-Authenticate}.

        @raise HTTPProblem: no token, or a wrong one.
        """
        given = bearerToken(request)
        if given is not None and hmac.compare_digest(given, token):
            return
        request.responseHeaders.setRawHeaders(
            b"WWW-Authenticate",
            [b'Bearer realm="imapmig"' + (b', error="invalid_token"' if given else b"")],
        )
        raise HTTPProblem(
            http.UNAUTHORIZED,
            "a valid bearer token is required" if given is None else "wrong token",
        )

    def _route(self, request: Request, client: str) -> Callable[[], Deferred[dict[str, object]]]:
        """
        The control C{request}'s path names, ready to apply.

        @raise HTTPProblem: no such control (404).
        """
        path = request.postpath or []
        if len(path) == 1 and path[0] in _EVERY_ACTIONS:
            return self._every(path[0], client)
        if path[:1] == [b"bulk"]:
            return self._bulk(request, path[1:], client)
        if len(path) == 3 and path[0] == b"jobs" and path[2] in _JOB_ACTIONS:
            return self._one(path[1], path[2], client)
        raise HTTPProblem(http.NOT_FOUND, "no such control")

    def _every(self, segment: bytes, client: str) -> Callable[[], Deferred[dict[str, object]]]:
        """
        Control C{segment} (C{pause-all} or C{resume-all}), ready to
        apply to every job.
        """
        action = segment.decode("ascii")
        method, said = _EVERY_ACTIONS[segment]
        every: Callable[[str], Deferred[int]] = getattr(self._controls, method)

        def applyAll() -> Deferred[dict[str, object]]:
            return every(client).addCallback(
                lambda count: {
                    "ok": True,
                    "action": action,
                    "jobs": count,
                    "message": f"{plural(count, 'job')} {said}",
                }
            )

        return applyAll

    def _one(
        self, segment: bytes, action: bytes, client: str
    ) -> Callable[[], Deferred[dict[str, object]]]:
        """
        Control C{action} (one of L{_JOB_ACTIONS}), ready to apply to the
        job named C{segment}.

        @raise HTTPProblem: a name that is not UTF-8 (404).
        """
        try:
            # twisted.web percent-decoded each segment already.
            name = segment.decode("utf-8")
        except UnicodeDecodeError:
            raise HTTPProblem(http.NOT_FOUND, "no such job") from None
        method, said = _JOB_ACTIONS[action]
        control: Callable[[str, str], Deferred[JobState]] = getattr(self._controls, method)

        def applyOne() -> Deferred[dict[str, object]]:
            return control(name, client).addCallback(
                lambda state: {
                    "ok": True,
                    "job": name,
                    "state": state.value,
                    "message": said.format(name),
                }
            )

        return applyOne

    def _bulk(
        self, request: Request, path: list[bytes], client: str
    ) -> Callable[[], Deferred[dict[str, object]]]:
        """
        The bulk control C{path} (C{[ACTION]} or C{[ACTION, b"preview"]})
        names, ready to apply to the jobs its body's filter selects.

        @raise HTTPProblem: no such control (404), a bad filter or no
            confirmation (400), a selection other than the one confirmed
            (409).
        """
        action = _bulkAction(path)
        view = self._view
        if view is None or action is None:
            raise HTTPProblem(http.NOT_FOUND, "no such control")
        body = _jsonBody(request)
        query = _bulkFilter(body, view)
        controls = self._controls
        selected = [view.nameOf(job) for job in matchingJobs(view, view.jobs(), query)]
        names = [name for name in selected if controls.applies(action, name)]
        if path[1:]:
            preview = _bulkPreview(action, len(selected), names)
            return lambda: succeed(preview)
        _checkConfirmed(body, action, names)

        def applyBulk() -> Deferred[dict[str, object]]:
            return controls.bulk(action, names, client, _describeFilter(query)).addCallback(
                lambda changed: {
                    "ok": True,
                    "action": action,
                    "jobs": changed,
                    "selected": len(names),
                    "message": f"{action}: {plural(changed, 'job')} of {len(names)}",
                }
            )

        return applyBulk


def _redacted(path: bytes, token: bytes) -> bytes:
    """
    C{path}, each segment that holds a part of C{token} (8 characters of
    it or more, percent-encoded or not) replaced by C{[redacted]}.
    """
    width = min(8, len(token))
    parts = {token[n : n + width] for n in range(len(token) - width + 1)}
    return b"/".join(
        b"[redacted]" if _holdsAny(segment, parts) else segment for segment in path.split(b"/")
    )


def _holdsAny(segment: bytes, parts: AbstractSet[bytes]) -> bool:
    """
    Whether C{segment} holds one of C{parts}, percent-encoded or not.
    """
    return any(part in form for form in (segment, unquote_to_bytes(segment)) for part in parts)


def _bulkAction(path: list[bytes]) -> str | None:
    """
    The action of a bulk control's C{path} (C{[ACTION]} or C{[ACTION,
    b"preview"]}), if it names one (of L{BULK_ACTIONS}).
    """
    action = path[0].decode("ascii", "replace") if path else ""
    if action in BULK_ACTIONS and path[1:] in ([], [b"preview"]):
        return action
    return None


def _checkSize(request: Request) -> None:
    """
    Refuse a request without a body (400) or with one larger than
    L{MAX_BODY} (413).

    @raise HTTPProblem: why.
    """
    content = request.content
    if content is None:
        raise HTTPProblem(http.BAD_REQUEST, "no body")
    content.seek(0, 2)
    if content.tell() > MAX_BODY:
        raise HTTPProblem(
            http.REQUEST_ENTITY_TOO_LARGE, f"the body is larger than {MAX_BODY} octets"
        )


def _sameSite(request: Request) -> bool:
    """
    Whether C{request}'s C{Sec-Fetch-Site}, if any, is C{same-origin} or
    C{none}.
    """
    site = request.getHeader(b"sec-fetch-site")
    return site is None or site.strip().lower() in _SAME_SITE


def _isJSON(request: Request) -> bool:
    """
    Whether C{request} says C{Content-Type: application/json}.
    """
    return _mediaType(request) == b"application/json"


# What a request must be, in the order checked, and why one that is not
# is refused (403).
_FORBIDDEN: tuple[tuple[Callable[[Request], bool], str], ...] = (
    (sameOrigin, "cross-origin request refused"),
    (_sameSite, "cross-site request refused"),
    (_isJSON, "Content-Type must be application/json"),
)


def _bulkPreview(action: str, selected: int, names: list[str]) -> dict[str, object]:
    """
    The answer to a bulk control's preview: C{action} applies to C{names}
    of the C{selected} jobs the filter selects.
    """
    return {
        "ok": True,
        "action": action,
        "preview": True,
        "matched": selected,
        "jobs": len(names),
        "selection": _selectionDigest(names),
        "message": f"{action} applies to {len(names)} of the"
        f" {plural(selected, 'job')} the filter selects",
    }


def _checkConfirmed(body: dict[str, object], action: str, names: list[str]) -> None:
    """
    Refuse a bulk control whose body does not confirm that it applies to
    C{names}: the count and selection of its preview.

    @raise HTTPProblem: no confirmation (400), or one of other jobs (409).
    """
    count = body.get("count")
    confirmed = body.get("selection")
    if not isinstance(count, int) or isinstance(count, bool) or not isinstance(confirmed, str):
        raise HTTPProblem(
            http.BAD_REQUEST, "confirm a bulk control: give the count and selection of its preview"
        )
    if count != len(names) or not hmac.compare_digest(
        confirmed.encode("utf-8"), _selectionDigest(names).encode("ascii")
    ):
        raise HTTPProblem(
            http.CONFLICT,
            f"the jobs selected changed since the preview ({action} applies to"
            f" {plural(len(names), 'job')} now, not the {count} confirmed): preview again",
        )


def _jsonBody(request: Request) -> dict[str, object]:
    """
    The request's body: empty, or a JSON object, whose members are
    ignored but for a bulk control's.

    @raise HTTPProblem: a body that is not a JSON object (400).
    """
    content = request.content
    assert content is not None
    content.seek(0)
    body = content.read(MAX_BODY + 1).strip()
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        raise HTTPProblem(http.BAD_REQUEST, "the body is not JSON") from None
    if not isinstance(parsed, dict):
        raise HTTPProblem(http.BAD_REQUEST, "the body must be a JSON object")
    return parsed


def _bulkFilter(body: dict[str, object], view: ProgressView) -> JobQuery:
    """
    The filter of a bulk control's body: C{state} (a list, or a string
    of states separated by commas), C{q} and C{errors}, as
    C{/status.json} takes them.

    @raise HTTPProblem: a member of the wrong type or value (400).
    """
    try:
        return parseJobQuery(b"", _filterArguments(body), view.stateNames())
    except HTTPProblem as e:
        raise HTTPProblem(http.BAD_REQUEST, f"the filter: {e.message}") from None


def _filterArguments(body: dict[str, object]) -> dict[bytes, list[bytes]]:
    """
    The filter of a bulk control's body as C{/status.json}'s query
    arguments.

    @raise HTTPProblem: a member of the wrong type (400).
    """
    states = body.get("state", [])
    if isinstance(states, list) and all(isinstance(s, str) for s in states):
        states = ",".join(states)
    text, errors = body.get("q", ""), body.get("errors", False)
    if not isinstance(states, str) or not isinstance(text, str) or not isinstance(errors, bool):
        raise HTTPProblem(
            http.BAD_REQUEST, "the filter: state is a list of states, q a string, errors true or false"
        )
    return {
        b"state": [states.encode("utf-8")],
        b"q": [text.encode("utf-8")],
        b"errors": [b"1" if errors else b"0"],
    }


def _describeFilter(query: JobQuery) -> str:
    """
    A bulk control's filter, in words, for its log line.
    """
    parts = []
    if query.states:
        parts.append("in state " + " or ".join(query.states))
    if query.text:
        parts.append(f"whose name holds {escapedExcerpt(query.text.encode('utf-8'))}")
    if query.errorsOnly:
        parts.append("with errors")
    return ", ".join(parts) if parts else "(all)"


def _selectionDigest(names: Sequence[str]) -> str:
    """
    What a bulk control's confirmation carries of the jobs it applies
    to: a digest of their names, in order.
    """
    return hashlib.sha256(json.dumps(list(names)).encode("utf-8")).hexdigest()[:32]


def _answer(request: Request, code: int, body: dict[str, object]) -> bytes:
    """
    Set C{request}'s code and the headers of a JSON answer; the body.
    """
    request.setResponseCode(code)
    headers = request.responseHeaders
    headers.setRawHeaders(b"Content-Type", [b"application/json; charset=utf-8"])
    headers.setRawHeaders(b"Cache-Control", [b"no-store"])
    headers.setRawHeaders(b"X-Content-Type-Options", [b"nosniff"])
    return json.dumps(body).encode("utf-8") + b"\n"
