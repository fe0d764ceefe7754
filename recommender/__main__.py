"""`python -m recommender analyze PATH [--format text|json]`."""

from __future__ import annotations

import sys

from recommender.cli import main

if __name__ == "__main__":
    sys.exit(main())
