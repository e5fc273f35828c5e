"""``python -m partnd.cli``: run the ``partnd`` command line."""

import sys

from partnd.cli.commands import main

sys.exit(main())
