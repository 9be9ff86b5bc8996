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
`register` here, which checks it first, and is given to the saver as
``DurableSaver(<keyword>=URL)``.

The rooms that ask which tier does what go by its role (`roles.Roles`),
never by its name or its place in the list. A light module: the command
line reads it for ``--help``; a kind's classes and hooks are imported when
first used.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..option_table import OPTIONS
from .postgres.kind import POSTGRES
from .redis.kind import REDIS
from .sqlite.kind import SQLITE
from .tier_kind import DEFAULT_SQLITE_PATH, TierKind, kind_named, kind_of, kinds, unregister
from .tier_kind import register as _register

# The package's own kinds, each registered by its package (``kind.py``).
BUILT_IN = frozenset({SQLITE.keyword, REDIS.keyword, POSTGRES.keyword})


def register(kind: TierKind) -> TierKind:
    """Register a kind of tier from outside the package (once per keyword;
    it is `kind`): its keyword, variable and flag must be free, a shared
    role needs a URL scheme and the hand-off hook, and its classes must
    import and hold its role. Then `DurableSaver(<keyword>=URL)`,
    ``from_env`` (its variable) and the command line (its flag) take it."""
    if kind_named(kind.keyword) is None:
        _check_new(kind)
    return _register(kind)


def _check_new(kind: TierKind) -> None:
    """A kind from outside the package: its keyword, variable and flag free,
    a URL scheme and the hand-off hook for a shared role, and classes that
    import and hold its role."""
    taken = {o.keyword for o in OPTIONS} | {o.flat for o in OPTIONS} | {"other_tiers"}
    if kind.keyword in taken:
        raise ConfigError(f"a tier kind cannot be named {kind.keyword!r}: the saver has an option of that name.")
    others = [*OPTIONS, *kinds()]
    if any(getattr(o, "env", None) == kind.env for o in others):
        raise ConfigError(f"the variable {kind.env} is another option's or tier kind's: give the kind its own.")
    if any(getattr(o, "flag", None) == kind.flag for o in others):
        raise ConfigError(f"the flag {kind.flag} is another option's or tier kind's: name the kind otherwise.")
    if not kind.schemes:
        raise ConfigError(f"the {kind.keyword} kind needs its URL schemes (schemes=('{kind.keyword}://',)).")
    if kind.ears is None:
        raise ConfigError(
            f"the {kind.keyword} kind is a {kind.role.value} tier, which can hold writer leases: it needs ears= "
            "(how a replica listens on it for a kept lease asked back; see tiers/postgres/kind.py)."
        )
    for asynchronous in (False, True):
        try:
            cls = kind.tier_class(asynchronous=asynchronous)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"the {kind.keyword} kind's class cannot be imported: {exc}.") from None
        role = getattr(cls, "role", kind.role)
        if role is not kind.role:
            raise ConfigError(
                f"the {kind.keyword} kind is registered as a {kind.role.value} tier, but its class "
                f"{cls.__name__} is a {getattr(role, 'value', role)} tier."
            )


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
    "register",
    "unregister",
]
