"""Checkpoint files: writing classic and V2 checkpoints (:mod:`.writer`),
where a new checkpoint's rows come from (:mod:`.sources`), cutting rows by
shard (:mod:`.shards`), incremental V2 reuse (:mod:`.incremental`) and the
key fingerprints in a sidecar's footer (:mod:`.fingerprints`)."""
