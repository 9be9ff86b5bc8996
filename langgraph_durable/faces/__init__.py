"""The saver's faces: `SaverBase` (what both share) and the operations,
written once async (`AsyncSaverOps`) with the sync face generated (`SaverOps`)."""
