"""Storage tiers. Each implements the small surface in `protocol_async.AsyncTier`
(and its generated sync twin `protocol.Tier`); the rooms above them own
every decision about them."""
