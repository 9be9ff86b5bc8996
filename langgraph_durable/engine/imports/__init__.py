"""Importing another saver's threads: what an import reads and decides
(`sources`: the stock savers' tables, the safe decoding, the report), and the
run (``importer_async`` and its generated sync twin ``importer``)."""
