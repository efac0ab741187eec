"""How a catalog runs: :class:`CatalogSettings`, given to the ``CatalogActor``
when it starts and handed to each of its parts (its services hold what they
need explicitly, so any of them can be built elsewhere from the same value).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from raydelta.protocol.maintenance_policy import MaintenanceDefaults
from raydelta.storage.catalog.credential_vending import (
    DEFAULT_LIFETIME_S,
    MAX_LIFETIME_S,
    MIN_LIFETIME_S,
    VendingSettings,
)


class CatalogSettings(BaseModel):
    """How a catalog runs. ``root``: where new tables are placed (and the
    principals file, when authorization is on); ``max_unpublished``: the
    per-table backlog of ratified, unpublished commits past which commits are
    refused (retryable); ``credential_*`` and ``sts_endpoint_url``: how
    temporary S3 credentials are vended
    (:mod:`raydelta.storage.catalog.credential_vending`); ``maintenance``: the
    catalog's automatic maintenance."""

    model_config = ConfigDict(frozen=True)

    root: str
    authorization: bool = False
    max_unpublished: int = Field(default=100_000, ge=1)
    staged_gc_grace_s: float = Field(default=600.0, ge=0)
    storage_options: dict[str, Any] | None = None
    credential_role_arn: str | None = None
    """The role S3 credentials are vended from (STS ``AssumeRole`` with a
    session policy per location); None: S3 credentials are refused."""
    credential_lifetime_s: int = Field(
        default=DEFAULT_LIFETIME_S, ge=MIN_LIFETIME_S, le=MAX_LIFETIME_S
    )
    sts_endpoint_url: str | None = None
    credential_external_id: str | None = None
    maintenance: MaintenanceDefaults = Field(default_factory=MaintenanceDefaults)
    """Automatic maintenance of the managed tables: on, and the defaults of
    each table's policy (:mod:`raydelta.protocol.maintenance_policy`)."""

    def vending(self) -> VendingSettings:
        """The part of these settings credential vending needs."""
        return VendingSettings(
            role_arn=self.credential_role_arn,
            lifetime_s=self.credential_lifetime_s,
            sts_endpoint_url=self.sts_endpoint_url,
            external_id=self.credential_external_id,
        )


__all__ = ["CatalogSettings"]
