"""`python -m rlvr ...` is the same as the `rlvr` command."""

import sys

from rlvr.cli import main

sys.exit(main())
