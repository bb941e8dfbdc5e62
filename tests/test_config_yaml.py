# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for the YAML parsing of L{imapmig.config.loadConfig}: libyaml when
PyYAML has it, the pure-Python parser's description of every error.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig import config

EXAMPLE = Path(__file__).parent.parent / "config" / "imapmig.example.yaml"


class ParseYAMLTests(SynchronousTestCase):
    """
    L{config._parseYAML} is C{yaml.safe_load}, faster.
    """

    def test_libyamlUsed(self) -> None:
        """
        When PyYAML was built with libyaml, its safe loader is the one used.
        """
        if not yaml.__with_libyaml__:
            self.assertIsNone(config._FAST_LOADER)
        else:
            self.assertIs(config._FAST_LOADER, yaml.CSafeLoader)

    def test_sameDocument(self) -> None:
        """
        The example configuration and a document with every scalar type
        parse to what C{yaml.safe_load} returns.
        """
        content = EXAMPLE.read_bytes() + (
            b"\nextra:\n  n: 12\n  f: 1.5e3\n  b: yes\n  z: ~\n  d: 2024-01-02\n"
            b"  s: '007'\n  o: 0o17\n  l: [a, {b: c}]\n"
        )
        self.assertEqual(config._parseYAML(content), yaml.safe_load(content))

    def test_sameError(self) -> None:
        """
        A document that is not valid YAML raises the error the pure-Python
        parser raises, with the same wording and positions.
        """
        for content in (
            b"state: x\njobs:\n  - name: [alice\n",
            b"state: x\n  jobs: []\n",
            b"a: b\n\tc: d\n",
            b"key: \xc3\x28\n",
            b"key: \"bell \x07\"\n",
        ):
            expected = self.assertRaises(yaml.YAMLError, yaml.safe_load, content)
            error = self.assertRaises(yaml.YAMLError, config._parseYAML, content)
            self.assertEqual(str(error), str(expected))
            self.assertIs(type(error), type(expected))
