"""
Scheduling many jobs: the job queue (L{imapmig.schedule.queue}), the grants
that bound how many jobs run and how many connections each server and
account sees (L{imapmig.schedule.grants}), and the rates and daily budgets
(L{imapmig.schedule.throttle}); and the scheduler that runs the jobs under
them (L{imapmig.schedule.scheduler}).
"""
