"""The spec's number types for fields parsed from log JSON: ``int`` and ``long``.

Invariants:
- A value outside the type's width is refused (it could not be put in a
  checkpoint or an Arrow table either).
- Only a JSON integer is one: pydantic's lax mode would read ``true`` as 1,
  ``"12"`` and ``12.0`` as 12, so ``"size": false`` or
  ``"minReaderVersion": true`` would become numbers. Strict, as delta-rs and
  delta-kernel-rs (serde) are.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

Int = Annotated[int, Field(strict=True, ge=-(2**31), le=2**31 - 1)]
"""The spec's ``int`` (32 bits)."""

Long = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1)]
"""The spec's ``long`` (64 bits)."""

NonNegativeInt = Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)]
"""An ``int`` that counts or locates something (a DV's offset and size)."""

NonNegativeLong = Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)]
"""A ``long`` that counts something (a DV's cardinality)."""
