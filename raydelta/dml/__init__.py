"""DML on Delta tables, executed on Ray: DELETE, UPDATE, RESTORE, and the
change data feed reader. MERGE and OPTIMIZE build on the same pieces:

- :mod:`raydelta.dml.execution`: candidate files (pruning + skipping), task
  groups, Ray tasks with all-or-nothing cleanup;
- :mod:`raydelta.storage.data.dml`: the per-file work (DVs, copy-on-write,
  change data files) through the one data writer;
- :mod:`raydelta.dml.operations`: validation, staging, the one commit with
  its read set and delta-spark's operation metrics;
- :mod:`raydelta.dml.restore`, :mod:`raydelta.dml.changes`.
"""

from raydelta.dml.operations import StagedDml, stage_delete, stage_update
from raydelta.protocol.dml_metrics import DeleteMetrics, RestoreMetrics, UpdateMetrics

__all__ = [
    "DeleteMetrics",
    "RestoreMetrics",
    "StagedDml",
    "UpdateMetrics",
    "stage_delete",
    "stage_update",
]
