"""Data files: the one writer (:mod:`.writer`), reading and writing parquet
for engines without a Delta reader (:mod:`.files`), deletion-vector files
(:mod:`.deletion_vectors`), a file's live rows (:mod:`.live_rows`), and the
per-file work of DELETE/UPDATE (:mod:`.dml`), MERGE (:mod:`.merge`) and
OPTIMIZE (:mod:`.optimize`). Nothing here commits."""
