"""Unity Catalog's model on the catalog actor, as services the actor holds
(:mod:`raydelta.actors.catalog.unity.service`): catalogs and schemas,
tables, commits; its replies are :mod:`raydelta.protocol.unity_catalog`."""
