"""The archive: S3-compatible object storage behind the hot tiers.

Its role is archive (`model.roles.Role.ARCHIVE`): never the lease tier, never
asked on a step's path. It holds an asynchronous replica of every thread
(`replica`), sealed segments a thread at a time (`segments`), the threads
that left the hot tiers when idle (`archiver_async.AsyncArchiver.archive_thread`,
brought back on their next read), and what rebuilds the hot tiers after
they are lost (`AsyncArchiver.restore`). Needs the ``s3`` extra (obstore).
"""

from ..model.backlog import ArchiveLag
from .replica import DEFAULT_ARCHIVE_LAG_S
from .reports import ArchiveOutcome, ArchiveReport, RestoreReport
from .store_async import ENV_ARCHIVE_URL, parse_archive_url

__all__ = [
    "DEFAULT_ARCHIVE_LAG_S",
    "ENV_ARCHIVE_URL",
    "ArchiveLag",
    "ArchiveOutcome",
    "ArchiveReport",
    "RestoreReport",
    "parse_archive_url",
]
