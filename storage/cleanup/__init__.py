"""Deleting what a table no longer needs: metadata cleanup of ``_delta_log``
(:mod:`.metadata`) and VACUUM of data files (:mod:`.vacuum`), with what
VACUUM reads from the log (:mod:`.log_references`), the directory listing
(:mod:`.listing`) and lite mode's candidates from expired tombstones
(:mod:`.tombstones`)."""
