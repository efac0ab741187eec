"""The ``CleanupActor`` (:mod:`.actor`): metadata cleanup and VACUUM for one
table, on policy and on demand."""
