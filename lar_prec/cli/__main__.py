"""``python -m lar_prec.cli`` is the ``lar-prec`` command, as ``python -m lar_prec`` is."""
from lar_prec.cli import main

if __name__ == "__main__":
    main()
