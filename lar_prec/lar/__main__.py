"""``python -m lar_prec.lar`` is the bundled load_and_run."""
import sys

from lar_prec.lar.main import main

if __name__ == "__main__":
    sys.exit(main())
