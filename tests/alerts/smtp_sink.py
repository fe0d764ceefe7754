"""A tiny local SMTP server in a thread: enough of RFC 5321 for Django's SMTP backend.

`messages` collects (recipients, raw message). `reply_to_rcpt` changes the answer to RCPT TO
(e.g. "550 no such user" or "451 try again later") to exercise the sorting of failures.
"""

from __future__ import annotations

import socketserver
import threading
from dataclasses import dataclass, field


@dataclass
class SmtpSink:
    reply_to_rcpt: str = "250 OK"
    messages: list[tuple[list[str], str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        sink = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                recipients: list[str] = []
                self._say("220 sink ESMTP")
                while line := self.rfile.readline().decode("utf-8", "replace"):
                    verb = line[:4].upper()
                    if verb in ("HELO", "EHLO"):
                        self._say("250 sink")
                    elif verb == "MAIL":
                        recipients = []
                        self._say("250 OK")
                    elif verb == "RCPT":
                        recipients.append(line.split(":", 1)[1].strip().strip("<>"))
                        self._say(sink.reply_to_rcpt)
                    elif verb == "DATA":
                        self._say("354 end with .")
                        sink.messages.append((recipients, self._read_data()))
                        self._say("250 queued")
                    elif verb == "QUIT":
                        self._say("221 bye")
                        return
                    else:  # RSET, NOOP
                        self._say("250 OK")

            def _read_data(self) -> str:
                lines = []
                while (line := self.rfile.readline().decode("utf-8", "replace")) not in (
                    ".\r\n",
                    "",
                ):
                    lines.append(line)
                return "".join(lines)

            def _say(self, text: str) -> None:
                self.wfile.write(f"{text}\r\n".encode())

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SmtpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
