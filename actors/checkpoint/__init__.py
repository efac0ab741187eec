"""Checkpoints built on Ray: the ``CheckpointActor`` (:mod:`.actor`), one
checkpoint's plan, tasks and publication (:mod:`.runner`, :mod:`.tasks`,
:mod:`.one_task`), what it reports (:mod:`.results`,
:mod:`.process_memory`), and the Ray-job entry point (:mod:`.job`)."""
