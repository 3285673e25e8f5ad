"""``python -m lar_prec`` is the ``lar-prec`` command."""
from lar_prec.cli import main

if __name__ == "__main__":
    main()
