"""
Migration jobs: one source drained into one destination account.

  - L{migration}: L{MigrationJob}, a run of attempts;
  - L{settings}: L{JobSettings}, how a job copies;
  - L{machine}: the job's state machine, the one holder of its state;
  - L{retry}: how transient failures are retried;
  - L{backoff}: what a run does when an attempt ends early;
  - L{attempt}: an attempt's destination connections;
  - L{listing}: what the source holds and what is left to copy;
  - L{copying}: copying what is left over an attempt's connections;
  - L{workshare}: the units of work the connections share;
  - L{sending}: one connection's copy loop;
  - L{destination}: preparing the destination's mailboxes;
  - L{recording}: the in-flight journal and the outcomes;
  - L{reconcile}: settling the journal against the destination.
"""

from imapmig.job.machine import JobInputs, JobMachine
from imapmig.job.migration import MigrationJob
from imapmig.job.recording import OutcomeRecorder
from imapmig.job.retry import RetryPolicy
from imapmig.job.settings import JobSettings

__all__ = [
    "JobInputs",
    "JobMachine",
    "JobSettings",
    "MigrationJob",
    "OutcomeRecorder",
    "RetryPolicy",
]
