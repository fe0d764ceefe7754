from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "perfweb.settings")
django.setup(set_prefix=False)

from perfweb.handlers import Handler  # noqa: E402 - needs the apps loaded

application = Handler()
