"""`python -m specq.cli` runs the specq command line (same as the `specq` console script)."""

from .app import main

main()
