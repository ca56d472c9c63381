"""``python -m pfedma_flwr run|experiment|report ...`` (the ``pfedma`` command)."""

import sys

from pfedma_flwr.cli import main

sys.exit(main())
