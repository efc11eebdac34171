"""`python -m axon.cli`: the `axon` command."""

from axon.cli import main

main()
