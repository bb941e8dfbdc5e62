# -*- test-case-name: tests.test_dashboard -*-
"""
A development harness for the dashboard: the real L{DashboardResource}
plus the contract's JSON routes answered from the fixtures in
C{tests/fixtures/dashboard/} (paged, filtered and sorted as the daemon
does), so the page can be developed and looked at in a browser before the
daemon serves the new JSON.

    python -m tests.dashboardharness --port 8765 [--jobs 10000] [--finished | --held]

C{--jobs N} replaces the fixture's jobs by N copies of them (for speed
checks); each poll advances the running jobs a little so the page moves.
Controls accept the token C{dev-token} (C{--token}).
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote

from twisted.web import http
from twisted.web.pages import notFound
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request, Site

from imapmig.status.dashboard import mountDashboard

FIXTURES = Path(__file__).parent / "fixtures" / "dashboard"

_ATTENTION = {
    "failed": 0, "done_with_failures": 1, "backing_off": 2, "paused": 2, "paused_by_server": 2,
    "deferred": 2, "waiting": 3, "connecting": 3, "running": 3, "stopping": 3,
}


def attentionRank(job: dict[str, Any]) -> int:
    """
    The daemon's C{sort=attention} rank (L{imapmig.status.progressview}).
    """
    rank = _ATTENTION.get(job["state"], 4)
    return 1 if rank and job["messages_failed"] else rank


_SORT_KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "attention": attentionRank,
    "name": lambda job: job["name"],
    "state": lambda job: job["state"],
    "progress": lambda job: job["percent"] if job["percent"] is not None else -1.0,
    "failed": lambda job: job["messages_failed"],
    "rate": lambda job: job["messages_per_second"] or 0.0,
    "eta": lambda job: job["eta_seconds"] if job["eta_seconds"] is not None else -1.0,
}


class FixtureRun:
    """
    The fixture snapshot, optionally with C{jobs} copies of its jobs, moved
    a step forward on every L{snapshot}.
    """

    def __init__(self, finished: bool = False, jobs: int | None = None, held: bool = False) -> None:
        """
        @param finished: serve the finished, verified run instead.
        @param jobs: how many jobs to serve; L{None} for the fixture's own.
        @param held: serve the run where no job can move instead (paused,
            paused by the server, deferred by a budget; one done with
            failures, one failed).
        """
        name = "status-finished.json" if finished else "status-held.json" if held else "status.json"
        self.base: dict[str, Any] = json.loads((FIXTURES / name).read_text("utf-8"))
        self.finished = finished
        originals: list[dict[str, Any]] = self.base["jobs"]
        self.details = {
            job["name"]: json.loads((FIXTURES / "jobs" / f"{job['name']}.json").read_text("utf-8"))
            for job in originals
        }
        self.failures = {
            job["name"]: json.loads((FIXTURES / "failures" / f"{job['name']}.json").read_text("utf-8"))
            for job in originals
        }
        if jobs is None:
            self.jobs = originals
            self.template = {job["name"]: job["name"] for job in originals}
        else:
            self.jobs = []
            self.template = {}
            for index in range(jobs):
                original = originals[index % len(originals)]
                job = copy.deepcopy(original)
                job["name"] = f"user{index:05d}@example.org"
                self.template[job["name"]] = original["name"]
                self.jobs.append(job)
        self.polls = 0

    def advance(self) -> None:
        """
        Move every running job on by two seconds at its rate.
        """
        self.polls += 1
        if self.finished:
            return
        for job in self.jobs:
            rate = job["messages_per_second"]
            if job["state"] == "running" and rate and job["messages_total"]:
                job["messages_done"] = min(
                    job["messages_total"] - job["messages_failed"], job["messages_done"] + int(rate * 2)
                )
                job["percent"] = round(
                    (job["messages_done"] + job["messages_failed"]) / job["messages_total"] * 100, 2
                )

    def snapshot(self, args: dict[bytes, list[bytes]]) -> dict[str, Any]:
        """
        The snapshot with one page of jobs, as C{/status.json?args} answers.

        @raise ValueError: for a bad number.
        """
        self.advance()
        first = _arg(args, b"offset", "0")
        offset, limit = int(first), int(_arg(args, b"limit", "100"))
        if offset < 0 or not 1 <= limit <= 500:
            raise ValueError("offset or limit out of range")
        states = [s for s in _arg(args, b"state", "").split(",") if s]
        q = _arg(args, b"q", "").lower()
        errors = _arg(args, b"errors", "") == "1"
        sort = _arg(args, b"sort", "order")
        matched = [
            job
            for job in self.jobs
            if (not states or job["state"] in states)
            and q in job["name"].lower()
            and (not errors or job["error"] or job["messages_failed"])
        ]
        if sort.lstrip("-") in _SORT_KEYS:
            matched.sort(key=_SORT_KEYS[sort.lstrip("-")], reverse=sort.startswith("-"))
        body = dict(self.base)
        body["time"] = self.base["time"] + 2 * self.polls
        body["jobs"] = matched[offset : offset + limit]
        body["controls"] = {"enabled": True}
        body["page"] = {
            "offset": offset, "limit": limit, "matched": len(matched), "sort": sort,
            "state": states, "q": q, "errors": errors,
        }
        if len(self.jobs) != len(self.base["jobs"]):
            totals = dict(body["totals"])
            totals["jobs_total"] = len(self.jobs)
            totals["jobs_counted"] = sum(1 for job in self.jobs if job["counted"])
            totals["jobs"] = {state: 0 for state in totals["jobs"]}
            for job in self.jobs:
                totals["jobs"][job["state"]] += 1
            body["totals"] = totals
        return body

    def find(self, name: str) -> dict[str, Any] | None:
        """
        The job called C{name}, if any.
        """
        for job in self.jobs:
            if job["name"] == name:
                return job
        return None


def _arg(args: dict[bytes, list[bytes]], name: bytes, default: str) -> str:
    """
    The first value of query argument C{name}, decoded.
    """
    return args.get(name, [default.encode()])[0].decode("utf-8")


def _json(request: Request, body: object, code: int = 200) -> bytes:
    """
    Answer C{request} with C{body} as JSON.
    """
    request.setResponseCode(code)
    request.setHeader(b"Content-Type", b"application/json; charset=utf-8")
    request.setHeader(b"Cache-Control", b"no-store")
    return json.dumps(body).encode("utf-8")


class HarnessRoot(Resource):
    """
    The contract's routes over a L{FixtureRun}: C{/status.json},
    C{/jobs/NAME.json}, C{/jobs/NAME/failures.json}, the manifests and the
    controls; the dashboard at C{/} and C{/static/}.
    """

    def __init__(self, run: FixtureRun, token: str) -> None:
        """
        @param run: the data.
        @param token: the bearer token the controls accept.
        """
        super().__init__()
        self.run = run
        self.token = token
        mountDashboard(self)

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        Route by the whole remaining path.
        """
        segments = [path] + list(request.postpath or [])
        return _Route(self, [unquote(s.decode("utf-8")) for s in segments])


class _Route(Resource):
    """
    One request to the harness, rendered by L{HarnessRoot}'s data.
    """

    isLeaf = True

    def __init__(self, root: HarnessRoot, segments: list[str]) -> None:
        """
        @param root: the harness, for its data.
        @param segments: the request's path segments, unquoted.
        """
        super().__init__()
        self.root = root
        self.segments = segments

    def render_GET(self, request: Request) -> bytes:
        """
        The JSON routes.
        """
        run, segments = self.root.run, self.segments
        try:
            if segments == ["status.json"]:
                return _json(request, run.snapshot(request.args or {}))
            if len(segments) == 2 and segments[0] == "jobs" and segments[1].endswith(".json"):
                return self.detail(request, segments[1][: -len(".json")])
            if len(segments) == 3 and segments[0] == "jobs" and segments[2] == "failures.json":
                job = run.find(segments[1])
                if job is None:
                    return _json(request, {"error": "no such job"}, 404)
                return _json(request, self.failures(request.args or {}, run.template[job["name"]]))
            if len(segments) == 3 and segments[0] == "jobs" and segments[2].startswith("manifest."):
                request.setHeader(b"Content-Type", b"text/csv; charset=utf-8")
                return b"job,outcome,folder,mailbox,key,size,message_id,reason\r\n"
        except ValueError as e:
            return _json(request, {"error": str(e)}, 400)
        return notFound().render(request)  # type: ignore[no-any-return]

    def detail(self, request: Request, name: str) -> bytes:
        """
        C{/jobs/NAME.json}.
        """
        job = self.root.run.find(name)
        if job is None:
            return _json(request, {"error": f"no such job: {name}"}, 404)
        detail = dict(self.root.run.details[self.root.run.template[name]])
        detail["job"] = job
        return _json(request, detail)

    def failures(self, args: dict[bytes, list[bytes]], template: str) -> dict[str, Any]:
        """
        One page of a job's failed messages.
        """
        offset, limit = int(_arg(args, b"offset", "0")), int(_arg(args, b"limit", "50"))
        # The daemon's `after` is an opaque key; here, the index to start at.
        start = offset + int(_arg(args, b"after", "0") or "0")
        q = _arg(args, b"q", "").lower()
        items = [
            item for item in self.root.run.failures[template]
            if q in json.dumps(item).lower()
        ]
        following = str(start + limit) if start + limit < len(items) else None
        return {"offset": offset, "limit": limit, "matched": len(items), "matched_exact": True,
                "q": q, "next": following, "items": items[start : start + limit]}

    def render_POST(self, request: Request) -> bytes:
        """
        The controls, with the contract's checks of token and content type.
        """
        if request.getHeader(b"content-type") != b"application/json":
            return _json(request, {"error": "a control request must be application/json"}, 403)
        if request.getHeader(b"authorization") != f"Bearer {self.root.token}".encode():
            request.setHeader(b"WWW-Authenticate", b"Bearer")
            return _json(request, {"error": "a valid bearer token is required"}, 401)
        segments = self.segments
        if segments in (["control", "pause-all"], ["control", "resume-all"]):
            return _json(request, {"ok": True})
        if len(segments) == 4 and segments[:2] == ["control", "jobs"]:
            job = self.root.run.find(segments[2])
            if job is None:
                return _json(request, {"error": "no such job"}, 404)
            action = segments[3]
            if action == "pause" and job["state"] not in ("paused", "done", "failed", "cancelled"):
                job["state"], job["paused"] = "paused", True
            elif action == "resume" and job["state"] == "paused":
                job["state"], job["paused"] = "running", False
            elif action == "cancel" and job["state"] not in ("done", "failed", "cancelled"):
                job["state"] = "cancelled"
            elif action == "retry-failed" and job["messages_failed"]:
                pass
            else:
                return _json(request, {"error": f"{action} does not apply to a {job['state']} job"}, 409)
            return _json(request, {"ok": True, "job": job["name"], "state": job["state"]})
        request.setResponseCode(http.NOT_FOUND)
        return _json(request, {"error": "no such control"}, 404)


def main() -> None:
    """
    Serve the harness on loopback until interrupted.
    """
    from twisted.internet import reactor

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--finished", action="store_true")
    parser.add_argument("--held", action="store_true")
    parser.add_argument("--token", default="dev-token")
    options = parser.parse_args()
    site = Site(HarnessRoot(FixtureRun(options.finished, options.jobs, options.held), options.token))
    reactor.listenTCP(options.port, site, interface="127.0.0.1")  # type: ignore[arg-type]
    reactor.run()


if __name__ == "__main__":
    main()
