"""``python -m simulator --port N [options]``."""

from simulator.main import main

main()
