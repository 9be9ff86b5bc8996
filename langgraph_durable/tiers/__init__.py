"""Storage tiers. Each implements the small surface in `base.TierProtocol`;
the tier chain (`chain_async.py`) owns every decision about them."""
