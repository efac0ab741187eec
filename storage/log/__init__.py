"""The log: log stores (list, read, put-if-absent; :mod:`.store`,
:mod:`.s3_store`), reading a segment's files (:mod:`.reader`), log
compaction files (:mod:`.compaction`) and table history (:mod:`.history`)."""
