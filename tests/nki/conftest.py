import pytest

import axon.nki


@pytest.fixture(scope="session", autouse=True)
def _shim() -> None:
    axon.nki.install_import_shim()
