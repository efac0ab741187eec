"""The ``raydelta`` command line (the ``raydelta`` script runs :func:`main`).

- :mod:`.app`: the parser, ``snapshot``, ``history`` and ``demo``, and
  :func:`main`;
- :mod:`.checkpoint`, :mod:`.cleanup`, :mod:`.status`, :mod:`.catalog`: the
  subcommands that need Ray, each registering itself with the parser.
"""

from raydelta.cli.app import main

__all__ = ["main"]
