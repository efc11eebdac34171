"""`python -m axon`: the `axon` command (as `python -m axon.cli`)."""

from axon.entry import main

main()
