"""The saver's faces: `Runtime` (what every view of a saver shares: tiers,
chains, leases, background tasks, closing), `SaverBase` (one view: the
runtime and a codec) and the operations, written once async
(`AsyncSaverOps`) with the sync face generated (`SaverOps`)."""
