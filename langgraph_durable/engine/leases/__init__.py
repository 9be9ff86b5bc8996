"""One writer per thread: which run of this saver holds which thread's
lease (`book`), taking, renewing and giving back leases in the tiers
(``keeper_async`` and its generated sync twin ``keeper``), and hearing
another replica ask for a kept lease (`handoff`). The lease decisions
themselves are pure, in ``model/lease.py``."""
