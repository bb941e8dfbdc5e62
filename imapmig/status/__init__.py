# -*- test-case-name: tests.test_status -*-
"""
What the daemon shows of itself over HTTP: twisted.web resources that read
L{imapmig.progress.MigrationProgress} and never touch a job or the wire.

L{imapmig.status.resource.buildStatusSite} builds the site that
L{imapmig.daemon.service} serves.
"""
