# -*- test-case-name: tests.test_testing_dovecot -*-
"""
Test support shipped with imapmig: a private Dovecot on loopback
(L{imapmig.testing.dovecot}) and a deterministic sample-mailbox generator
(L{imapmig.testing.corpus}), used by the tests, the demo and the benchmark.
"""
