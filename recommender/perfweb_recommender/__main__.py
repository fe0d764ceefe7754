"""`python -m perfweb_recommender analyze PATH [--format text|json]`."""

from __future__ import annotations

import sys

# What the recommender extra installs; an install with the agent extra only lacks them.
EXTRA_MODULES = frozenset({"orjson", "msgspec", "numpy"})


def _run() -> int:
    try:
        from perfweb_recommender.cli import main
    except ModuleNotFoundError as error:
        if error.name not in EXTRA_MODULES:
            raise
        sys.stderr.write(
            f"python -m perfweb_recommender needs the recommender extra ({error.name} is missing): "
            "pip install 'perfweb[recommender]'\n"
        )
        return 2
    return main()


if __name__ == "__main__":
    sys.exit(_run())
