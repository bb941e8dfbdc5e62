"""
Scheduling many jobs: the job queue (L{imapmig.schedule.queue}) and the
grants that bound how many jobs run and how many connections each server
and account sees (L{imapmig.schedule.grants}).
"""
