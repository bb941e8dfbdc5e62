# -*- test-case-name: tests.test_controls -*-
"""
What an admin may do to the jobs while the daemon runs: pause, resume,
cancel and retry-failed per job, for the jobs a filter selects (bulk),
and pause-all, resume-all.

L{IJobControls} is the interface the status site's C{/control} resource
(L{imapmig.status.controls}) calls; L{imapmig.schedule.jobcontrols.JobControls},
the scheduler's C{controls}, provides it over the job queue, where pause
and cancel are queue states (so that a queue shared by a fleet of daemons
carries them to whichever daemon runs the job).

This module is a leaf: it imports nothing of imapmig's but the progress
model's states.
"""

from __future__ import annotations

from typing import Sequence

from twisted.internet.defer import Deferred
from zope.interface import Interface

from imapmig.progress import JobState

BULK_ACTIONS = ("pause", "resume", "retry-failed", "cancel")
"""
The controls that apply to many jobs at once (L{IJobControls.bulk}).
"""


class IJobControls(Interface):
    """
    The admin's controls over the jobs.  Each returns a Deferred (a queue
    shared by a fleet answers over the network); a job control fires with
    the job's new state, or fails with L{UnknownJob} or
    L{ControlRefused}.  Each logs one line naming the control, the job and
    C{by}.
    """

    def pause(job: str, by: str) -> "Deferred[JobState]":
        """
        Pause C{job}: a queued job is not claimed; a running one is stopped
        as the daemon stops it (the replies in flight awaited), and gives
        back its connections and its job slot.  It shows C{paused} until
        resumed.

        @param by: who asks (the client's address), for the log.
        @return: fires with L{JobState.PAUSED}.
        """

    def resume(job: str, by: str) -> "Deferred[JobState]":
        """
        Queue a paused job again, ahead of the jobs not yet claimed; it
        goes on where it was (the state store knows what was copied).

        @return: fires with L{JobState.QUEUED}.
        """

    def cancel(job: str, by: str) -> "Deferred[JobState]":
        """
        Cancel C{job}: stopped as a pause stops it, then ended for good;
        the queue is drained without it (not every job completed).

        @return: fires with L{JobState.CANCELLED}.
        """

    def retryFailed(job: str, by: str) -> "Deferred[JobState]":
        """
        Try C{job}'s failed messages (or, if the job failed as a whole,
        the job) again: a job that has ended is queued again, one running
        runs again once its run ends (a run does not retry what failed in
        it), a queued or paused one retries them when it runs.  Refused
        when nothing of the job failed.

        @return: fires with the job's new state.
        """

    def pauseAll(by: str) -> "Deferred[int]":
        """
        Pause every job that has not ended: nothing more is claimed.

        @return: fires with how many jobs were paused.
        """

    def resumeAll(by: str) -> "Deferred[int]":
        """
        Resume every paused job.

        @return: fires with how many jobs were resumed.
        """

    def applies(action: str, job: str) -> bool:
        """
        Whether control C{action} (one of L{BULK_ACTIONS}) would change
        C{job} now, as the job's own control checks it (retry-failed: the
        job failed, or has failed messages, as its progress shows); false
        for a job that does not exist.
        """

    def bulk(action: str, jobs: Sequence[str], by: str, selection: str) -> "Deferred[int]":
        """
        Apply control C{action} (one of L{BULK_ACTIONS}) to each of C{jobs}
        it applies to (L{applies}), recording the holds of them all at
        once; log one line, not one per job: the control, C{by}, the
        C{selection} (the filter, in words) and how many jobs it changed.

        @return: fires with how many jobs it changed.
        """
