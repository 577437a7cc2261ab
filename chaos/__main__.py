"""``python -m chaos``: see :mod:`chaos.runner`."""

import sys

from chaos.runner import main

sys.exit(main())
