"""``python -m curriculum.domains.swe``: see :mod:`curriculum.domains.swe.cli`."""

import sys

from curriculum.domains.swe.cli import main

sys.exit(main())
