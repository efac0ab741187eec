"""The managing catalog of catalog-managed tables (CATALOG_MANAGED.md): the
``CatalogActor`` (:mod:`.actor`), its principals and grants (:mod:`.auth`),
the per-table coordinators it hosts (:mod:`.tables`), group commit of
ratifications (:mod:`.group_commit`), publishing (:mod:`.publisher`),
Unity Catalog's model and commit protocol (:mod:`.unity`,
:mod:`.unity_commits`), and the client of a managed table (:mod:`.client`)."""
