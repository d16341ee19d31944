"""``python -m benchmarks``: see :mod:`benchmarks.run`."""

from __future__ import annotations

import sys

if __name__ == "__main__":  # promoter processes re-import this module under another name
    from benchmarks.run import main

    sys.exit(main(sys.argv[1:]))
