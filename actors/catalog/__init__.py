"""The managing catalog of catalog-managed tables (CATALOG_MANAGED.md): the
``CatalogActor`` (:mod:`.actor`), composed of the parts it holds — the
tables it has loaded (:mod:`.managed`), where tables may live
(:mod:`.locations`), creating, upgrading and dropping them
(:mod:`.lifecycle`), credential vending (:mod:`.credentials`) and Unity
Catalog's model and commit protocol (:mod:`.unity`) — its settings
(:mod:`.settings`), principals and grants (:mod:`.auth`), the per-table
coordinators (:mod:`.tables`), group commit of ratifications
(:mod:`.group_commit`), publishing (:mod:`.publisher`), and the client of a
managed table (:mod:`.client`)."""
