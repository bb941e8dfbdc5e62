# -*- test-case-name: tests.test_webhook -*-
"""
Notifications by webhook (C{notify:}): a JSON POST when a job fails, when
the run finishes, and when nothing has progressed for
C{notify.stalled_after} seconds.

Nothing did this before: the status site and C{/metrics} wait to be
asked, and the log to be read.  Two parts:

  - L{WebhookSender} posts each notification, in order, one request at a
    time, through an L{IAgent} on the injected reactor (HTTPS verified
    against the system's trust store, host name checked): each request
    bounded by L{TIMEOUT}, retried up to L{ATTEMPTS} times with a backoff
    (L{retryDelay}) on a network error, a timeout, C{408}, C{429} or
    C{5xx}, and given up on another C{4xx}.  Its queue holds at most
    L{QUEUE_LIMIT} notifications: when the receiver is down for long, the
    oldest are dropped, and counted.  Nothing it does blocks the reactor.
  - L{RunWatcher}, a service, reads the progress model every
    L{CHECK_EVERY} seconds (as the status site does: nothing is added to
    the hot path) and tells the sender what happened since.

A payload holds no secret, password or path: job and server names (as
C{/metrics} labels them), states, counts, and a failed job's reason with
every path in it replaced by C{[path]} (L{imapmig.status.redact}).  The token goes in the
C{Authorization} header only; the log names the receiver by its scheme
and host only (a webhook URL's path is often its secret).
"""

from __future__ import annotations

import json
from collections import deque
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from twisted.application.service import Service
from twisted.internet.defer import Deferred, TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import Agent
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgent, IResponse

import imapmig
from imapmig.config.model import NotifyConfig
from imapmig.errors import BodyTooLarge, WebhookRefused, WebhookUnavailable, escapedExcerpt
from imapmig.oauth.httpclient import BoundedBody, BytesBody, QuietConnectionPool, shortError
from imapmig.imap.signals import excerpt
from imapmig.progress import ENDED, JobState, MigrationProgress
from imapmig.status.redact import withoutPaths
from imapmig.daemon.rootservice import MigrationService
from imapmig.access.secrets import Secret

__all__ = [
    "ATTEMPTS",
    "CHECK_EVERY",
    "QUEUE_LIMIT",
    "TIMEOUT",
    "RunWatcher",
    "WebhookSender",
    "agentFor",
    "retryDelay",
]

log = Logger()

QUEUE_LIMIT = 100
"""
Notifications waiting to be sent, at most; a new one past it drops the
oldest.
"""

ATTEMPTS = 5
"""
Requests made for one notification before it is given up.
"""

TIMEOUT = 10.0
"""
Seconds one request may take, connecting and reading the answer included.
"""

FIRST_RETRY = 2.0
MAX_RETRY = 60.0

CHECK_EVERY = 5.0
"""
Seconds between two readings of the progress model.
"""

FLUSH_AT_STOP = 5.0
"""
Seconds a stopping daemon waits for the notifications still queued (the
run's end among them) to be sent.
"""

ANSWER_LIMIT = 4096
"""
Octets of a receiver's answer read (to quote it in the log); a longer one
is not read further.
"""

JOBS_NAMED = 20
"""
Jobs a C{stalled} notification names; it counts all.
"""

_REASON_LIMIT = 300
_TRANSIENT = frozenset({408, 425, 429})
# Finished: every job ended by itself (not stopped by a stopping daemon).
_FINISHED = frozenset(
    {JobState.DONE, JobState.DONE_WITH_FAILURES, JobState.FAILED, JobState.CANCELLED}
)
# Jobs expected to move: not ended, not paused (by the admin, a server or a budget).
_STILL = ENDED | {JobState.PAUSED, JobState.PAUSED_BY_SERVER, JobState.DEFERRED}


def retryDelay(attempt: int) -> float:
    """
    Seconds before the request after the C{attempt}th failed one: 2, 4, 8,
    ... at most L{MAX_RETRY}.
    """
    return min(FIRST_RETRY * 2.0 ** (attempt - 1), MAX_RETRY)


def receiverForLogs(url: str) -> str:
    """
    C{url}'s scheme, host and port only: its path and query may be the
    receiver's secret (Slack's and Teams' URLs are).
    """
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0].split('?', 1)[0].rpartition('@')[2]}"


def _isoTime(seconds: float) -> str:
    when = datetime.fromtimestamp(seconds, timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def agentFor(reactor: Any, url: str) -> IAgent:
    """
    The agent the daemon posts to C{url} with: for https, certificates
    verified against the system's trust store (host name checked); a new
    connection per request, connecting within L{TIMEOUT}.
    """
    pool = QuietConnectionPool(reactor, persistent=False)
    if not url.lower().startswith("https:"):
        # Plain http to loopback: a daemon without TLS has no OpenSSL
        # (imapmig.access.cleartext), which imapmig.access.tlsidentity imports.
        return Agent(reactor, connectTimeout=TIMEOUT, pool=pool)
    from imapmig.access.tlsidentity import HostnameVerifyingPolicy

    return Agent(reactor, HostnameVerifyingPolicy(), connectTimeout=TIMEOUT, pool=pool)


class WebhookSender:
    """
    Posts notifications to one webhook, in order, with retries, from a
    bounded queue (see the module).

    @ivar dropped: notifications dropped from a full queue.
    @ivar abandoned: notifications given up after their attempts, or
        refused.
    @ivar delivered: notifications the receiver took (C{2xx}).
    """

    def __init__(
        self,
        reactor: IReactorTime,
        agent: IAgent,
        url: str,
        token: Secret | None,
        queueLimit: int = QUEUE_LIMIT,
        attempts: int = ATTEMPTS,
        timeout: float = TIMEOUT,
    ) -> None:
        """
        @param reactor: times the requests and the retries.
        @param agent: makes the requests (L{agentFor}).
        @param url: where to post.
        @param token: sent as C{Authorization: Bearer}, or L{None}.
        """
        self._clock = reactor
        self._agent = agent
        self._queueLimit = queueLimit
        self._attempts = attempts
        self._timeout = timeout
        self._queue: deque[tuple[str, bytes]] = deque()
        self._request: Deferred[None] | None = None
        self._retry: IDelayedCall | None = None
        self._stopped = False
        self._whenIdle: list[Deferred[None]] = []
        self._droppedUnreported = 0
        # Whether the last request failed (its reason is logged once).
        self._failing = False
        self.dropped = self.abandoned = self.delivered = 0
        self.retarget(url, token)

    def retarget(self, url: str, token: Secret | None) -> None:
        """
        Post to C{url} with C{token} from the next request on (a reload).
        """
        self._url = url
        self._token = token
        self.receiver = receiverForLogs(url)

    @property
    def pending(self) -> int:
        """
        Notifications not yet delivered nor given up: queued, and the one
        being sent.
        """
        return len(self._queue) + (self._request is not None or self._retry is not None)

    def send(self, kind: str, payload: Mapping[str, object]) -> None:
        """
        Queue a notification: C{payload} (JSON-ready) posted as it is.

        @param kind: names it in the log (C{"job_failed"}).
        """
        if self._stopped:
            return
        if len(self._queue) >= self._queueLimit:
            dropped, _ = self._queue.popleft()
            self.dropped += 1
            self._droppedUnreported += 1
            if self._droppedUnreported == 1:
                log.warn(
                    "Webhook {receiver}: {limit} notifications wait to be sent; dropping"
                    " the oldest ({dropped} first) until it answers",
                    receiver=self.receiver,
                    limit=self._queueLimit,
                    dropped=dropped,
                )
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        self._queue.append((kind, body))
        self._next()

    def _next(self) -> None:
        """
        Send the oldest notification, unless one is under way.
        """
        if self._stopped or self._request is not None or self._retry is not None:
            return
        if not self._queue:
            self._idle()
            return
        kind, body = self._queue.popleft()
        self._attempt(kind, body, 1)

    def _idle(self) -> None:
        """
        Nothing is left to send: fire those waiting for it (L{flush}).
        """
        waiting, self._whenIdle = self._whenIdle, []
        for d in waiting:
            d.callback(None)

    def _attempt(self, kind: str, body: bytes, attempt: int) -> None:
        self._retry = None
        request = self._request = Deferred.fromCoroutine(self._post(body))
        request.addTimeout(self._timeout, self._clock)
        request.addCallbacks(
            lambda _: self._delivered(kind, attempt),
            lambda failure: self._failed(failure, kind, body, attempt),
        )

    def _delivered(self, kind: str, attempt: int) -> None:
        self._request = None
        self.delivered += 1
        failing, self._failing = self._failing, False
        if failing or self._droppedUnreported:
            log.info(
                "Webhook {receiver} took the {kind} notification (attempt {attempt});"
                " {dropped} dropped from a full queue before",
                receiver=self.receiver,
                kind=kind,
                attempt=attempt,
                dropped=self._droppedUnreported,
            )
            self._droppedUnreported = 0
        self._next()

    def _failed(self, failure: Failure, kind: str, body: bytes, attempt: int) -> None:
        self._request = None
        if self._stopped:
            return
        error = self._problemOf(failure.value)
        if isinstance(error, WebhookUnavailable) and attempt < self._attempts:
            self._retryLater(error, kind, body, attempt)
        else:
            self._giveUp(error, kind, attempt)

    def _problemOf(self, error: BaseException | None) -> WebhookRefused | WebhookUnavailable:
        """
        Why a notification was not taken: C{error} itself if it is a
        webhook's refusal or unavailability, else it as an unavailability
        (no answer in time, a connection that failed).
        """
        if isinstance(error, (WebhookRefused, WebhookUnavailable)):
            return error
        if isinstance(error, DeferredTimeout):
            return WebhookUnavailable(f"no answer within {self._timeout:g} s")
        if error is None:
            error = Exception()
        return WebhookUnavailable(shortError(error) if isinstance(error, Exception) else repr(error))

    def _retryLater(
        self, error: WebhookUnavailable, kind: str, body: bytes, attempt: int
    ) -> None:
        """
        Send the notification again after a delay: C{attempt}'s
        L{retryDelay}, or as long as the receiver's C{Retry-After} asks,
        up to L{MAX_RETRY}.
        """
        delay = retryDelay(attempt)
        if error.retryAfter is not None:
            delay = min(max(delay, error.retryAfter), MAX_RETRY)
        # The first failure after a success says why, once; the
        # retries of an endpoint that stays down are debug lines.
        emit = log.debug if self._failing else log.warn
        self._failing = True
        emit(
            "Webhook {receiver}: {kind} notification not taken ({reason}); again in"
            " {delay:g} s (attempt {attempt} of {attempts})",
            receiver=self.receiver,
            kind=kind,
            reason=str(error),
            delay=delay,
            attempt=attempt,
            attempts=self._attempts,
        )
        self._retry = self._clock.callLater(delay, self._attempt, kind, body, attempt + 1)

    def _giveUp(self, error: Exception, kind: str, attempt: int) -> None:
        """
        Give the notification up after C{attempt} attempts, and send the
        next.
        """
        self.abandoned += 1
        log.warn(
            "Webhook {receiver}: {kind} notification given up after {attempt} {attempts}:"
            " {reason}; {waiting} more waiting",
            receiver=self.receiver,
            kind=kind,
            attempt=attempt,
            attempts="attempt" if attempt == 1 else "attempts",
            reason=str(error),
            waiting=len(self._queue),
        )
        self._next()

    async def _post(self, body: bytes) -> None:
        headers = Headers(
            {
                b"Content-Type": [b"application/json"],
                b"User-Agent": [f"imapmig/{imapmig.__version__}".encode("ascii")],
            }
        )
        if self._token is not None:
            headers.addRawHeader(b"Authorization", b"Bearer " + self._token.value.encode("utf-8"))
        response: IResponse = await self._agent.request(
            b"POST", self._url.encode("ascii"), headers, BytesBody(body)
        )
        answer = await self._read(response)
        if not 200 <= response.code < 300:
            raise _refusal(response, answer)

    async def _read(self, response: IResponse) -> bytes:
        receiver = BoundedBody(ANSWER_LIMIT)
        response.deliverBody(receiver)
        try:
            return await receiver.done
        except BodyTooLarge:
            return b""

    def flush(self, within: float) -> Deferred[None]:
        """
        Fires once every notification queued is delivered or given up, or
        after C{within} seconds; then stops (L{stop}).
        """
        done: Deferred[None] = Deferred()
        if self.pending == 0:
            done.callback(None)
        else:
            self._whenIdle.append(done)

            def late() -> None:
                if not done.called:
                    done.callback(None)

            timer = self._clock.callLater(within, late)

            def over(result: None) -> None:
                if timer.active():
                    timer.cancel()
                self.stop()

            done.addCallback(over)
            return done
        self.stop()
        return done

    def stop(self) -> None:
        """
        Send nothing more: the request under way is cancelled, the retry
        waiting forgotten; what is still queued is logged as not sent.
        """
        if self._stopped:
            return
        self._stopped = True
        left = len(self._queue) + self._cancelUnderWay()
        self._queue.clear()
        if left:
            log.warn(
                "Webhook {receiver}: {count} notifications not sent (the daemon stops)",
                receiver=self.receiver,
                count=left,
            )

    def _cancelUnderWay(self) -> bool:
        """
        Cancel the request under way, or forget the retry waiting.

        @return: whether there was one.
        """
        retry, self._retry = self._retry, None
        if retry is not None and retry.active():
            retry.cancel()
        request, self._request = self._request, None
        if request is not None:
            request.cancel()
        return retry is not None or request is not None


def _refusal(response: IResponse, answer: bytes) -> WebhookRefused | WebhookUnavailable:
    """
    Why C{response} (not 2xx, its body C{answer}) did not take a
    notification: unavailable (5xx, or one of L{_TRANSIENT}: tried again),
    else refused.
    """
    code = response.code
    said = f"HTTP {code}" + (f": {escapedExcerpt(answer, 80)}" if answer.strip() else "")
    if code >= 500 or code in _TRANSIENT:
        return WebhookUnavailable(said, _retryAfter(response))
    hint = " (is notify.token_file the token it expects?)" if code in (401, 403) else ""
    return WebhookRefused(said + hint)


def _retryAfter(response: IResponse) -> float | None:
    """
    The seconds of a C{Retry-After} header, if it gives seconds.
    """
    values = response.headers.getRawHeaders(b"Retry-After") or []
    try:
        return float(int(values[0])) if values else None
    except ValueError:
        return None


class RunWatcher(Service):
    """
    Reads the progress model every L{CHECK_EVERY} seconds and notifies:
    C{job_failed} when a job enters the failed state, C{run_finished} when
    every job has ended by itself (done, failed or cancelled; again after
    a job runs anew), and C{stalled} when jobs run or wait (not paused)
    and no message has been settled for C{stalledAfter} seconds (once,
    until messages move again).
    """

    def __init__(
        self,
        progress: MigrationProgress,
        reactor: IReactorTime,
        config: NotifyConfig,
        serverOf: Callable[[str], str],
        sender: WebhookSender | None = None,
    ) -> None:
        """
        @param serverOf: a job's destination server name (its C{/metrics}
            label), by job name.
        @param sender: posts the notifications; by default one to
            C{config}'s webhook with L{agentFor}.
        """
        self._progress = progress
        self._clock = reactor
        self._serverOf = serverOf
        self.config = config
        self.sender = sender or WebhookSender(
            reactor, agentFor(reactor, config.webhookURL), config.webhookURL, config.token
        )
        self._loop: LoopingCall | None = None
        self._states: dict[str, JobState] = {}
        self._finished = False
        self._settled = -1
        self._movedAt = 0.0
        self._stallTold = False

    def startService(self) -> None:
        """
        Note where every job is (no notification for that), then check
        every L{CHECK_EVERY} seconds.
        """
        Service.startService(self)
        self._states = {job.name: job.state for job in self._progress}
        self._settled = sum(job.lifetimeCounts()[0] for job in self._progress)
        self._movedAt = self._clock.seconds()
        loop = self._loop = LoopingCall(self.check)
        loop.clock = self._clock
        loop.start(CHECK_EVERY, now=False)
        log.info(
            "Notifications go to {receiver} (a job failed, the run finished{stall})",
            receiver=self.sender.receiver,
            stall=self._stallText(),
        )

    def _stallText(self) -> str:
        stalled = self.config.stalledAfter
        return "" if stalled is None else f", nothing migrated for {stalled:g} s"

    def stopService(self) -> Deferred[None]:
        """
        Check once more (a run that just finished is told), then wait at
        most L{FLUSH_AT_STOP} seconds for the queue to be sent.
        """
        Service.stopService(self)
        loop, self._loop = self._loop, None
        if loop is not None and loop.running:
            loop.stop()
            self.check()
        return self.sender.flush(FLUSH_AT_STOP)

    def reconfigure(self, config: NotifyConfig) -> None:
        """
        Use C{config} from now on (a reload): its webhook, token and stall
        time.
        """
        if config == self.config:
            return
        self.config = config
        self.sender.retarget(config.webhookURL, config.token)
        self._stallTold = False
        log.info(
            "Notifications now go to {receiver} (a job failed, the run finished{stall})",
            receiver=self.sender.receiver,
            stall=self._stallText(),
        )

    def check(self) -> None:
        """
        Read every job's state and the messages settled, and notify what
        changed since the last check.
        """
        now = self._clock.seconds()
        states: dict[str, JobState] = {}
        settled = 0
        moving: list[str] = []
        for job in self._progress:
            state = job.state
            states[job.name] = state
            settled += job.lifetimeCounts()[0]
            if state is JobState.FAILED and self._states.get(job.name) is not JobState.FAILED:
                self._jobFailed(job.name, job.error, job.messagesDone, job.messagesFailed, now)
            if state not in _STILL:
                moving.append(job.name)
        self._states = states
        self._checkFinished(now, states)
        self._checkStall(now, settled, moving, states)

    def _checkFinished(self, now: float, states: dict[str, JobState]) -> None:
        """
        Notify C{run_finished} when every job has finished and the last
        check found some that had not.
        """
        finished = bool(states) and all(state in _FINISHED for state in states.values())
        if finished and not self._finished:
            self._runFinished(states, now)
        self._finished = finished

    def _checkStall(self, now: float, settled: int, moving: list[str], states: dict[str, JobState]) -> None:
        """
        Notify C{stalled} once when jobs that can move have settled no
        message for C{stalled_after}; any progress (or nothing left to
        move) starts the wait again.
        """
        if settled != self._settled or not moving:
            self._settled, self._movedAt, self._stallTold = settled, now, False
            return
        if not self._stalled(now):
            return
        self._stallTold = True
        self._send(
            "stalled",
            now,
            seconds_without_progress=round(now - self._movedAt),
            jobs_moving=len(moving),
            jobs=moving[:JOBS_NAMED],
            states=self._stateCounts(states),
        )

    def _stalled(self, now: float) -> bool:
        """
        Whether nothing has been settled for C{stalled_after} (if set), and
        C{stalled} is not yet told.
        """
        stalledAfter = self.config.stalledAfter
        return (
            stalledAfter is not None
            and not self._stallTold
            and now - self._movedAt >= stalledAfter
        )

    def _send(self, event: str, now: float, **fields: object) -> None:
        self.sender.send(
            event,
            {"event": event, "time": _isoTime(now), "version": imapmig.__version__, **fields},
        )

    def _jobFailed(
        self, name: str, error: str | None, done: int, failed: int, now: float
    ) -> None:
        reason = excerpt(withoutPaths(error or "no reason given"), _REASON_LIMIT)
        self._send(
            "job_failed",
            now,
            job=name,
            server=self._serverOf(name),
            reason=reason,
            messages_done=done,
            messages_failed=failed,
        )

    def _runFinished(self, states: Mapping[str, JobState], now: float) -> None:
        summary = self._progress.summary()
        totals: Any = summary["totals"]
        run: Any = summary["run"]
        self._send(
            "run_finished",
            now,
            jobs=self._stateCounts(states),
            messages_done=totals["messages_done"],
            messages_failed=totals["messages_failed"],
            seconds=run["elapsed_seconds"],
        )

    @staticmethod
    def _stateCounts(states: Mapping[str, JobState]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in states.values():
            counts[state.value] = counts.get(state.value, 0) + 1
        return counts


class _NotifyReloads:
    """
    Applies a reload's C{notify:} to the watcher (see L{watchRun}).
    """

    def __init__(self, watcher: RunWatcher, current: Callable[[], NotifyConfig | None]):
        self._watcher = watcher
        self._current = current

    def reloadStarted(self) -> None:
        pass

    def reloadEnded(self, applied: bool) -> None:
        new = self._current()
        if applied and new is not None:
            self._watcher.reconfigure(new)


def watchRun(
    root: MigrationService,
    notify: NotifyConfig,
    progress: MigrationProgress,
    reactor: Any,
    serverOf: Callable[[str], str],
    current: Callable[[], NotifyConfig | None],
) -> RunWatcher:
    """
    Add the L{RunWatcher} of C{notify} to C{root}, and apply each reload's
    C{notify:} to it: a changed URL, token or stall time from the next
    notification on.  (C{notify:} added or taken away needs a restart:
    L{imapmig.daemon.reloadplan}.)

    @param root: the daemon's root service (L{imapmig.daemon.rootservice}).
    @param current: the configuration's C{notify} as last reloaded.
    """
    watcher = RunWatcher(progress, reactor, notify, serverOf)
    # Called through Service: twisted's own methods, unannotated.
    Service.setName(watcher, "notify")
    Service.setServiceParent(watcher, root)
    root.addReloadObserver(_NotifyReloads(watcher, current))
    return watcher
