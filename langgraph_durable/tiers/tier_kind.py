"""A kind of tier (`TierKind`) and the table its packages register in.

The built-in kinds' packages register here (``tiers/<kind>/kind.py``);
`tiers.registry` imports them and is where the rooms above read the table
from. A kind from outside the package registers through
`options.register_tier_kind`, which checks it against the options first.
This module imports none of them, so a kind's package can register itself
here without a cycle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..model.roles import RANK, Role

DEFAULT_SQLITE_PATH = ".langgraph_durable/checkpoints.sqlite"

# A class or a function, or where to import it from: "module:attr", the
# module relative to this package (``redis.tier:RedisTier``) or absolute
# (``myapp.tiers:Warehouse``, when its first part is not one of ours).
Ref = str | Callable[..., Any]


def _load(ref: Ref) -> Any:
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    try:
        loaded = importlib.import_module(f"{__package__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith(f"{__package__}.{module.partition('.')[0]}"):
            raise
        loaded = importlib.import_module(module)
    return getattr(loaded, name)


@dataclass(frozen=True)
class TierKind:
    """One kind of tier."""

    keyword: str
    """Its keyword on `DurableSaver` and `from_urls` (and its tier name)."""
    role: Role
    env: str
    """The environment variable `from_env` and the command line read it from."""
    schemes: tuple[str, ...]
    """The URL prefixes it takes; empty for a file path."""
    what: str
    """What its value is, for help and errors."""
    classes: tuple[Ref, Ref]
    """Its sync and async classes (imported when first asked for). A shared
    tier's class is made as ``cls(url, **arguments(...))``."""
    arguments: Ref | None = None
    """``(options: options.TierOptions, supplied: Supplied | None,
    asynchronous: bool) -> dict``: its class's keyword arguments besides
    the URL (None: none)."""
    supplied: Ref | None = None
    """``(value) -> Supplied | None``: a client or pool of the caller's
    given instead of a URL, recognised (None: a URL only)."""
    ears: Ref | None = None
    """``(tier, channel: str, call_timeout: float | None) -> Ears``: a
    connection of its own listening on `channel` of a sync tier of this
    kind, for kept leases asked back (`engine.leases.handoff`); needed by a
    kind whose role can hold leases (hot or record)."""
    builtin: bool = False
    """One of the package's own kinds (sqlite, redis, postgres)."""

    def tier_class(self, *, asynchronous: bool) -> type[Any]:
        """The class of this kind's tiers on one face."""
        cls: type[Any] = _load(self.classes[1 if asynchronous else 0])
        return cls

    def hook(self, name: str) -> Any:
        """One of its hooks (`arguments`, `supplied`, `ears`), loaded; None
        if it has none."""
        ref = getattr(self, name)
        return None if ref is None else _load(ref)

    @property
    def flag(self) -> str:
        """Its command-line flag."""
        return f"--{self.keyword.replace('_', '-')}"

    def check(self, value: object) -> str:
        """`value` if it is a URL of this kind; else a `ConfigError` that says
        what one looks like."""
        from .base import redact  # only to say a URL is of the wrong kind

        if not self.schemes:
            raise TypeError(f"{self.keyword} takes a path, not a URL")
        if not isinstance(value, str) or not value.startswith(self.schemes):
            shown = redact(value) if isinstance(value, str) else type(value).__name__
            raise ConfigError(
                f"{self.keyword}= got {shown!r}, which is not a {self.keyword} URL: it must start with "
                f"{' or '.join(self.schemes)} (for example {self.schemes[0]}127.0.0.1/...)."
            )
        return value


_KINDS: dict[str, TierKind] = {}


def register(kind: TierKind) -> TierKind:
    """Register `kind` (once per keyword); it is `kind`. (The rules a kind
    from outside the package must also keep are checked by
    `options.register_tier_kind`, which calls this.)"""
    known = _KINDS.get(kind.keyword)
    if known is not None and known != kind:
        raise ConfigError(f"a tier kind named {kind.keyword!r} is already registered; unregister it first.")
    if kind.role is Role.LOCAL and any(k.role is Role.LOCAL for k in _KINDS.values() if k.keyword != kind.keyword):
        raise ConfigError("the local tier's kind is the SQLite file's; register a hot or record kind.")
    if not kind.keyword.isidentifier():
        raise ConfigError(f"a tier kind's keyword must be a Python identifier, not {kind.keyword!r}.")
    _KINDS[kind.keyword] = kind
    return kind


def unregister(keyword: str) -> None:
    """Forget a kind registered from outside the package (the built-in ones stay)."""
    if _KINDS.get(keyword) is not None and _KINDS[keyword].builtin:
        raise ConfigError(f"{keyword!r} is a built-in tier kind.")
    _KINDS.pop(keyword, None)


def kinds() -> tuple[TierKind, ...]:
    """Every registered kind, nearest first (the local one, then hot, then
    record; in the order registered within a role)."""
    return tuple(sorted(_KINDS.values(), key=lambda k: RANK[k.role]))


def kind_named(keyword: str) -> TierKind | None:
    return _KINDS.get(keyword)


def kind_of(url: str) -> TierKind | None:
    """The kind of tier a URL names, by its scheme (None for a path)."""
    return next((k for k in kinds() if k.schemes and url.startswith(k.schemes)), None)
