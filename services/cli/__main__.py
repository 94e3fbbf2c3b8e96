"""``python -m services.cli``: the ``imp`` command."""

import sys

from services.cli.main import main

sys.exit(main())
