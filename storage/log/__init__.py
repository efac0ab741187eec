"""The log as files: the log store names (:mod:`.store`: the table-storage
contract and its registry, from :mod:`raydelta.storage.backends`) and reading
a segment's files into actions and Arrow (:mod:`.reader`). What is built from
a log segment (snapshots, history, compaction files) lives one floor up, in
:mod:`raydelta.storage`."""
