"""``python -m sb3_ewma.scale``: see :mod:`sb3_ewma.scale.cli`."""

import sys

from sb3_ewma.scale.cli import main

sys.exit(main())
