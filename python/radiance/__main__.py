"""``python -m radiance ...`` is the ``radiance`` command."""

import sys

from .cli import main

sys.exit(main())
