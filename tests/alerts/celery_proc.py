"""`celery -A perfweb …` on a queue of its own, so a test's worker and beat never trade
messages with anybody else's on the shared Redis: python celery_proc.py worker|beat ARGS…"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    from perfweb.celery import app

    app.conf.task_default_queue = os.environ["PERFWEB_TEST_QUEUE"]
    app.start(sys.argv[1:])
