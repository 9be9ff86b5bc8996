"""The kinds of tier, and where a kind registers itself.

A kind of tier is a package (``tiers/sqlite``, ``tiers/redis``,
``tiers/postgres``) whose ``kind.py`` makes one `TierKind` and registers
it (`tier_kind.register`): the keyword that configures it, its role, the URL schemes it
takes, its environment variable (and so its command-line flag), its classes
(sync and async faces), and the hooks that make its class's arguments from
the saver's options, recognise a client or pool of the caller's, and listen
for hand-off requests on its tier. The rooms above iterate over `kinds()`:
the options and their checks, the saver's tiers and ``tier_names``, the
command line's flags, ``from_env``, the demo, the metrics' order and the
hand-off. A kind from outside the package (a test's, say) registers with
`langgraph_durable.register_tier_kind` (`options.register_tier_kind`),
which checks it against the options first, and is given to the saver as
``DurableSaver(<keyword>=URL)``.

The rooms that ask which tier does what go by its role (`roles.Roles`),
never by its name or its place in the list. A light module: the command
line reads it for ``--help``; a kind's classes and hooks are imported when
first used.
"""

from __future__ import annotations

from .postgres.kind import POSTGRES
from .redis.kind import REDIS
from .sqlite.kind import SQLITE
from .tier_kind import DEFAULT_SQLITE_PATH, TierKind, kind_named, kind_of, kinds, unregister

# The package's own kinds, each registered by its package (``kind.py``).
BUILT_IN = frozenset({SQLITE.keyword, REDIS.keyword, POSTGRES.keyword})


__all__ = [
    "BUILT_IN",
    "DEFAULT_SQLITE_PATH",
    "POSTGRES",
    "REDIS",
    "SQLITE",
    "TierKind",
    "kind_named",
    "kind_of",
    "kinds",
    "unregister",
]
