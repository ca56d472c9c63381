"""``python -m pfedma_flwr run ...``."""

import sys

from pfedma_flwr.launch import main

sys.exit(main())
