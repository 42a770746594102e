"""Scaffolding shared by the tests, one copy of each piece.

- ``net``: a free loopback port, and whether something listens on one;
- ``polling``: ``wait_for``, the one bounded wait for a condition;
- ``daphne``: a daphne subprocess of this checkout on the test database, started and polled
  until it listens;
- ``allocations``: checks of what the database holds that only tests ask for;
- ``handoffs``: Slurm handoff files written as the node's Prolog writes them.

``tests/`` is on ``sys.path`` (pytest puts the directory of the root ``conftest.py`` there), so
tests import these as ``from support.net import free_port``. ``tests/slurm/conftest.py`` keeps
its own copies for now.
"""
