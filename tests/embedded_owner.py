"""A process that owns an embedded server, for tests/test_embedded.py.

``python -m tests.embedded_owner ROLE DATA_DIR`` joins (or starts) the server in DATA_DIR,
prints ``ready`` and waits for a line on stdin, then exits normally. ROLE says what else the
process does with SIGTERM:

- ``plain``: nothing; SIGTERM finds the default disposition when the server starts.
- ``own-handler``: installs a handler that exits with status 7 before joining the server.
- ``command``: after joining, runs a command-style block that sets its own handlers and
  restores the previous ones (``cli.stop_on_signals``).
"""

from __future__ import annotations

import select
import signal
import sys
from pathlib import Path
from types import FrameType

OWN_HANDLER_STATUS = 7
SIGNAL_CHECK_SECONDS = 0.1


def _exit_own(signum: int, frame: FrameType | None) -> None:
    sys.exit(OWN_HANDLER_STATUS)


def main(role: str, data_dir: Path) -> None:
    # SIGINT as in a terminal, whatever this process inherited: a shell that starts a job in
    # the background without job control has it ignored, and an ignored SIGINT stays ignored
    # in every program started from there (this one included).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if role == "own-handler":
        signal.signal(signal.SIGTERM, _exit_own)
    from runledger_django.embedded import start_server

    start_server(data_dir)
    if role == "command":
        from runledger_django.management.cli import StopEvent, stop_on_signals

        with stop_on_signals(StopEvent()) as installed:
            assert installed
    print("ready", flush=True)  # noqa: T201  (the test reads it)
    # Wait for stdin in short selects rather than one blocking read: a signal that lands just
    # before a blocking read begins is only acted on once the read returns (the handler merely
    # sets a flag), and the test sends its signal right after reading "ready".
    while not select.select([sys.stdin], [], [], SIGNAL_CHECK_SECONDS)[0]:
        pass
    sys.stdin.readline()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
