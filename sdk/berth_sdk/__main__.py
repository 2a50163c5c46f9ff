"""python -m berth_sdk: the `berth` command line."""

from berth_sdk.cli import main

main()
