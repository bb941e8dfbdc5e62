"""
Scheduling many jobs: the grants that bound how many jobs run and how many
connections each server and account sees (L{imapmig.schedule.grants}), the
admin's controls (L{imapmig.schedule.controls}), the census of the sources
(L{imapmig.schedule.census}); and the scheduler that runs the jobs under
them (L{imapmig.schedule.scheduler}).  The job queue (L{imapmig.queue}) and
the rates and daily budgets (L{imapmig.throttle}) sit below the jobs, which
use them.
"""
