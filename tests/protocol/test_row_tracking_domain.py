"""The ``delta.rowTracking`` domain as delta-spark writes and reads it.

delta-spark 4.4 wrote ``{"rowIdHighWaterMark":4,"domainName":"delta.rowTracking"}``
(seen in tests/spark_delta, which also checks delta-spark reads ours); the
spec's text says ``highWaterMark``. Both read, delta-spark's shape written.
"""

from __future__ import annotations

import json

import pytest

from raydelta.protocol.actions import DomainMetadata
from raydelta.protocol.errors import InvalidFileActionError
from raydelta.protocol.row_tracking import (
    ROW_TRACKING_DOMAIN,
    high_water_mark_of,
    row_tracking_domain,
)


def _domain(configuration: str) -> DomainMetadata:
    return DomainMetadata(domain=ROW_TRACKING_DOMAIN, configuration=configuration)


def test_delta_spark_shape_is_read() -> None:
    written_by_spark = '{"rowIdHighWaterMark":4,"domainName":"delta.rowTracking"}'
    assert high_water_mark_of(_domain(written_by_spark)) == 4


def test_spec_text_shape_is_read() -> None:
    assert high_water_mark_of(_domain('{"highWaterMark":7}')) == 7


def test_written_shape_is_delta_sparks() -> None:
    domain = row_tracking_domain(12)
    assert json.loads(domain.configuration) == {
        "rowIdHighWaterMark": 12,
        "domainName": ROW_TRACKING_DOMAIN,
    }
    assert high_water_mark_of(domain) == 12


@pytest.mark.parametrize(
    "configuration",
    ['{"rowIdHighWaterMark":"4"}', '{"rowIdHighWaterMark":true}', "{}", "not json", "[]"],
)
def test_no_integer_mark_is_refused(configuration: str) -> None:
    with pytest.raises(InvalidFileActionError):
        high_water_mark_of(_domain(configuration))
