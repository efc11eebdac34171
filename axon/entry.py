"""The `axon` command's entry point: `axon.cli.main`, imported here so that a Ctrl-C while Python
loads the command (its first half second) ends as one line and exit 130, as it does afterwards,
instead of a KeyboardInterrupt traceback from the middle of an import."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from axon.cli import main as cli_main  # lazy: a Ctrl-C during this import is caught here
    except KeyboardInterrupt:
        sys.stderr.write("axon: interrupted\n")
        sys.exit(130)
    cli_main()
