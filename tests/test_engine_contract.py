"""The engine certification suite (:mod:`dbaops.testing.engine_contract`) on every registered
engine: one embedded server per engine, every check on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dbaops.dbms.registry import engine_names
from dbaops.testing.engine_contract import ContractServer, contract_checks, open_contract_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=engine_names())
async def contract_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ContractServer]:
    name: str = request.param
    if name == "tidb":
        request.getfixturevalue("tidb_binary")  # skipped (or failed in CI) without one
    async with open_contract_server(name, tmp_path_factory.mktemp(f"contract-{name}")) as cs:
        yield cs


@pytest.mark.parametrize("check", list(contract_checks()))
async def test_the_engine_meets_the_contract(contract_server: ContractServer, check: str) -> None:
    await contract_checks()[check](contract_server)


def test_every_registered_engine_gives_the_suite_its_facts() -> None:
    from dbaops.testing.engine_contract import engine_contract

    for name in engine_names():
        assert engine_contract(name).database
