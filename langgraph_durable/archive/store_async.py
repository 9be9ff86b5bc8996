"""The archive's object store: S3-compatible object storage through obstore.

`archive="s3://BUCKET/PREFIX"` names it. Credentials, region and endpoint
come from the standard variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``), as every S3 client reads them; an ``http://``
endpoint (MinIO or another server on a private network) is allowed as
given. The store holds opaque bytes under keys relative to its prefix;
what they mean is `segments`' business. Every failure to reach it is a
`TierUnavailable` naming the archive, so callers treat it as any tier
that is down.

This file is the async source: ``store.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from ..environment import ENV_ARCHIVE_URL
from ..errors import ConfigError, TierUnavailable

__all__ = ["ENV_ARCHIVE_URL", "AsyncArchiveStore", "parse_archive_url"]

SCHEMES = ("s3://",)
TIER = "archive"
# The store's own key (a copy of the system of record's): whoever can read
# the bucket can read every record in it anyway.
STORE_KEY_OBJECT = "v1/store-key"

# A call to the object store gives up after this long (its client retries
# within it): the archive is never on a step's path, but `archive_idle`,
# a bring-back and `close` wait for it.
CALL_TIMEOUT_S = 10.0
# S3 refuses object names over 1,024 bytes: the prefix leaves the rest to
# the longest name below it (`segments.MAX_FOLDER` and a segment's name).
MAX_PREFIX_BYTES = 300
MAX_RETRIES = 2


def parse_archive_url(url: object) -> tuple[str, str]:
    """``(bucket, prefix)`` of an ``s3://BUCKET/PREFIX`` URL, else `ConfigError`."""
    if not isinstance(url, str) or not url.startswith(SCHEMES):
        from ..tiers.base import redact

        shown = redact(url) if isinstance(url, str) else type(url).__name__
        raise ConfigError(
            f"archive= got {shown!r}, which is not an archive URL: it must start with s3:// "
            "(for example s3://my-bucket/langgraph); the endpoint and credentials come from AWS_* variables."
        )
    parts = urlsplit(url)
    if not parts.netloc:
        raise ConfigError(f"archive= got {url!r}, which names no bucket: use s3://BUCKET/PREFIX.")
    if parts.query or parts.fragment:
        raise ConfigError(f"archive= got {url!r}: an archive URL takes no ?query or #fragment; use s3://BUCKET/PREFIX.")
    prefix = parts.path.strip("/")
    if len(prefix.encode("utf-8")) > MAX_PREFIX_BYTES:
        raise ConfigError(
            f"archive= got a prefix of {len(prefix.encode('utf-8'))} bytes: at most {MAX_PREFIX_BYTES} leave room "
            "for the object names below it within the object store's 1,024-byte limit; use a shorter prefix."
        )
    return parts.netloc, prefix


def _obstore() -> Any:
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError:
        raise ConfigError(
            "archive= needs the s3 extra: pip install 'langgraph-durable[s3]' (it brings obstore)."
        ) from None
    return obstore, S3Store


@contextmanager
def _reaching(where: str, what: str) -> Iterator[None]:
    """The object store's errors as `TierUnavailable`, but a missing key
    (`FileNotFoundError`, for `get` to answer None)."""
    from obstore.exceptions import BaseError, NotFoundError

    try:
        yield
    except (FileNotFoundError, NotFoundError):
        raise FileNotFoundError(what) from None
    except (BaseError, OSError, RuntimeError, TimeoutError) as exc:
        first = (str(exc).splitlines() or [""])[0][:300]
        raise TierUnavailable(
            f"the archive at {where} could not {what} ({type(exc).__name__}: {first}). "
            "Check the bucket, the AWS_* variables and that the object store is running.",
            tier=TIER,
        ) from exc


class AsyncArchiveStore:
    """Bytes under keys in one bucket and prefix."""

    def __init__(self, url: str, *, env: Mapping[str, str] | None = None, timeout: float = CALL_TIMEOUT_S) -> None:
        self.bucket, self.prefix = parse_archive_url(url)
        self.url = url
        env = os.environ if env is None else env
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or ""
        options: dict[str, Any] = {"timeout": timedelta(seconds=timeout), "connect_timeout": timedelta(seconds=2)}
        if endpoint.startswith("http://"):
            options["allow_http"] = True
        config: dict[str, Any] = {}
        if endpoint:
            config["endpoint"] = endpoint
        if not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
            config["region"] = "us-east-1"
        self._obstore, s3store = _obstore()
        self._store = s3store(
            self.bucket,
            prefix=self.prefix or None,
            config=config,
            client_options=options,
            retry_config={"max_retries": MAX_RETRIES, "retry_timeout": timedelta(seconds=timeout)},
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    async def put(self, key: str, data: bytes) -> None:
        with _reaching(self.url, f"store {key!r}"):
            await self._obstore.put_async(self._store, key, data)

    async def create(self, key: str, data: bytes) -> bool:
        """Store `data` under `key` only if no object is there yet (a
        conditional write, ``If-None-Match: *``): whether it did. Of two
        writers at once, one does. An object store that does not take
        conditional writes gets a plain write."""
        from obstore.exceptions import AlreadyExistsError, GenericError, NotSupportedError, PreconditionError

        with _reaching(self.url, f"store {key!r}"):
            try:
                await self._obstore.put_async(self._store, key, data, mode="create")
            except (AlreadyExistsError, PreconditionError):
                return False
            except (NotSupportedError, GenericError) as exc:
                # Refused by the client, or by a server that answers the
                # header with 501 Not Implemented (some S3 look-alikes).
                if isinstance(exc, GenericError) and "NotImplemented" not in str(exc) and " 501 " not in str(exc):
                    raise
                await self._obstore.put_async(self._store, key, data)
        return True

    async def get(self, key: str) -> bytes | None:
        """The object's bytes; None when there is none under `key`."""
        with _reaching(self.url, f"read {key!r}"):
            try:
                result = await self._obstore.get_async(self._store, key)
                return bytes(await result.bytes_async())
            except FileNotFoundError:
                return None

    async def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`, sorted."""
        found: list[str] = []
        with _reaching(self.url, f"list {prefix!r}"):
            async for chunk in self._obstore.list(self._store, prefix, chunk_size=1000):
                found.extend(str(meta["path"]) for meta in chunk)
        return sorted(found)

    async def folders(self, prefix: str) -> list[str]:
        """The names one level below `prefix` (a "folder" ending in ``/``)."""
        with _reaching(self.url, f"list {prefix!r}"):
            listed = await self._obstore.list_with_delimiter_async(self._store, prefix)
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listed["common_prefixes"])

    async def store_key(self) -> str | None:
        """The copy of the store's key the archive keeps (base64), if any: a
        store whose hot tiers were lost reads its records with it again,
        once the operator vouched for it."""
        return (await self.store_key_object() or {}).get("store_key")

    async def store_key_object(self) -> dict[str, str] | None:
        """What the key object holds: ``store_key`` (base64) and, from this
        version on, ``store`` (the store's id, also in the owner object)."""
        data = await self.get(STORE_KEY_OBJECT)
        if data is None:
            return None
        try:
            body = json.loads(data)
            found = {"store_key": str(body["store_key"])}
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                f"the archive's {STORE_KEY_OBJECT} is not a key langgraph-durable wrote; remove it or restore it "
                "from a backup."
            ) from None
        if isinstance(body.get("store"), str):
            found["store"] = body["store"]
        return found

    async def keep_store_key(self, text: str, store_id: str) -> str:
        """Keep a copy of the store's key, unless one is kept already; the one
        kept. It names the store's id too, so a restore that finds the owner
        object gone still knows which store's segments to read."""
        kept = await self.store_key_object()
        if kept is None or (kept["store_key"] == text and kept.get("store") != store_id):
            await self.put(STORE_KEY_OBJECT, json.dumps({"store_key": text, "store": store_id}).encode())
            return text
        return kept["store_key"]

    async def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        with _reaching(self.url, f"delete {len(keys)} object(s)"):
            await self._obstore.delete_async(self._store, list(keys))
