"""``python -m clink``: the same as the ``clink`` command."""

import sys

from clink.cli import main

sys.exit(main())
