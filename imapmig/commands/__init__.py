"""
The commands: C{imapmig plan|report|verify|state} (L{imapmig.commands.cli})
and the demo (L{imapmig.commands.demo}).
"""
