"""`python -m app ...`: the same as the `engine` command.

The one module directly in engine/ that imports the application layer (app/): it is an
entry point, not part of the core, and nothing imports it.
"""
import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
