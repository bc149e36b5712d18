"""The fake PyPI index every test of the pypi source installs from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import respx

from tests.sources.pypi.test_pypi_source import FakeIndex


@pytest.fixture
def fake_index() -> Iterator[FakeIndex]:
    idx = FakeIndex()
    with respx.mock(assert_all_called=False) as router:
        idx.mount(router)
        yield idx
