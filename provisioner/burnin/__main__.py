"""`python -m provisioner.burnin` (see entry.py)."""

import sys

from provisioner.burnin.entry import main

if __name__ == "__main__":
    sys.exit(main())
