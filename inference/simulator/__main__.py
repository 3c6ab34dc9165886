"""``python -m inference.simulator --port N [options]``."""

from inference.simulator.main import main

main()
