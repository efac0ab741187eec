"""The log as files: log stores (list, read, put-if-absent; :mod:`.store`,
:mod:`.s3_store`) and reading a segment's files into actions and Arrow
(:mod:`.reader`). What is built from a log segment (snapshots, history,
compaction files) lives one floor up, in :mod:`raydelta.storage`."""
