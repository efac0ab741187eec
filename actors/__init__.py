"""raydelta's Ray actors: one class per responsibility.

- :mod:`raydelta.actors.table.host`: ``TableHost``, a process hosting many tables'
  coordinators (:mod:`raydelta.actors.table.hosted`), placed and fenced by
  :mod:`raydelta.actors.table.placement` and :mod:`raydelta.actors.table.ownership`;
- :mod:`raydelta.actors.checkpoint.actor`: ``CheckpointActor``, builds checkpoints;
- :mod:`raydelta.actors.cleanup.actor`: ``CleanupActor``, metadata cleanup and VACUUM;
- :mod:`raydelta.actors.table.client`: ``TableClient`` and ``Transaction``, the
  log-level handle on a table wherever it is hosted;
- :mod:`raydelta.actors.cluster`: the namespace, Ray start-up and actor lookup.

Actor handles are a public layer (``raydelta.Table.actor`` and friends):
their methods take and return the typed events of
:mod:`raydelta.protocol.events`.
"""
