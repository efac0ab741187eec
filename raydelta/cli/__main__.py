"""``python -m raydelta.cli``: the same as the ``raydelta`` script."""

from raydelta.cli.app import main

raise SystemExit(main())
