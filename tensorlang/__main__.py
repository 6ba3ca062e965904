"""`python -m tensorlang ...` is the `tl` command."""
import sys

from tensorlang.cli import main

sys.exit(main())
