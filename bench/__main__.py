"""`python -m bench ...`: the same as `tl bench ...`."""
import sys

from . import main

sys.exit(main(sys.argv[1:]))
