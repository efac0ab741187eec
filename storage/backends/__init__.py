"""Table storage: the contract every module above uses, and its backends.

:mod:`.contract` states the contract (:class:`~.contract.LogStore`: the log
under ``_delta_log`` and every other file of a table); :mod:`.registry`
picks a backend by URI scheme; each backend is one module: :mod:`.local`,
:mod:`.memory`, :mod:`.s3`, :mod:`.single_writer` (the fallback) and
:mod:`.exclusive_create`, over the shared fsspec implementation
:mod:`.fsspec_store`. fsspec is used here and nowhere above."""
