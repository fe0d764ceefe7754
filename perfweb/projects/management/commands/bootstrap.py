"""`python manage.py bootstrap --user demo --password demo --project demo` → `token=<TOKEN>`.

Idempotent: the user, project and membership are reused. A token is minted each time unless
`--token VALUE` installs a given one or `--token-file PATH` keeps one across runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from perfweb.projects.services import bootstrap


class Command(BaseCommand):
    help = "Create (or reuse) a user, a project and an ingest token; print token=<TOKEN>."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument("--project", required=True)
        parser.add_argument("--token", help="install this token instead of minting one")
        parser.add_argument("--token-file", type=Path, help="reuse the token kept here")

    def handle(self, *args: Any, **options: Any) -> None:
        token_file: Path | None = options["token_file"]
        token = options["token"]
        if token is None and token_file is not None and token_file.exists():
            token = token_file.read_text().strip() or None
        try:
            _, token = bootstrap(
                username=options["user"],
                password=options["password"],
                project_name=options["project"],
                token=token,
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
        if token_file is not None:
            _write_private(token_file, token)
        self.stdout.write(f"token={token}")


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.replace(temporary, path)
