"""
Tests for L{imapmig.config.endpointstring}.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.endpointstring import splitEndpoint


class SplitEndpointTests(SynchronousTestCase):
    """
    L{splitEndpoint} splits as Twisted's parser does.
    """

    def test_split(self) -> None:
        """
        C{:} separates arguments, the first C{=} a keyword from its value,
        a backslash makes the next character literal.
        """
        self.assertEqual(
            splitEndpoint("tcp:8025:interface=\\:\\:1:backlog=5"),
            (["tcp", "8025"], {"interface": "::1", "backlog": "5"}),
        )
        self.assertEqual(splitEndpoint("unix:/a=b"), (["unix"], {"/a": "b"}))

    def test_loneBackslash(self) -> None:
        """
        A string that ends with a lone backslash is refused.
        """
        self.assertRaises(ValueError, splitEndpoint, "tcp:8025\\")
