"""The catalog's storage: the durable store of ratified commits and table
names (:mod:`.ratified_store`, :mod:`.ratified_store_files`), namespaces
(:mod:`.namespaces`), JSON documents under the catalog's root
(:mod:`.root_documents`), and reading the commits a catalog returned
(:mod:`.commits`)."""
