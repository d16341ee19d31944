"""``python -m reliability --seconds 10`` (CI size) or ``--seconds 300`` (the long run)."""

from __future__ import annotations

import sys

from reliability.harness import main

if __name__ == "__main__":
    sys.exit(main())
