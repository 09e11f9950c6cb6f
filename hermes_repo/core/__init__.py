"""The write core, by job: what a store's units of work are made of.

:class:`~hermes_repo.database.Database` composes these layers, each above the one
before it:

* :mod:`.verdict`: what a driver error means (:class:`~.verdict.Failure`), the
  quarantine of a structurally damaged file and whether FTS damage is degradable;
* :mod:`.units`: the executors, units of work and reads replayed whole on transient
  errors, FTS detach, a lost commit settled by looking for its rows;
* :mod:`.driver`: the fast paths on the driver's own cursor (appends, loads, the
  search's reads);
* :mod:`.protocol`: :class:`WriteCore`, what a feature needs of a store.

This package's ``__init__`` loads only the Protocol, so a feature that names it loads
none of the executors.
"""

from .protocol import WriteCore

__all__ = ["WriteCore"]
