"""The process harness shared by the tests (``tests/``) and the bench (``bench/``): simulated SGLang
workers and ``smg`` on free loopback ports with their logs and clean stops (``engines``), and where
those logs go (``temp_files``).

Development only: not part of the wheel (pyproject.toml's package list leaves it out). It is imported
from a checkout, whose root is on ``sys.path`` when pytest runs the suite (``tests/`` is a package
under it) and when the bench runs as ``python -m bench.run`` from the root, as ``make bench`` does.
What only the tests need (a Daphne on the test database, nginx, pytest fixtures) stays in
``tests/support/``.
"""
