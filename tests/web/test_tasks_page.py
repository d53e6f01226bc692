"""The dashboard's tasks page (docs/howto/typed-args.md): each task of the App with its
args as JSON Schema, typed and encrypted marked, names escaped; without an App it says
how to give one."""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

import pgbaton
from pgbaton.web import create_app

from .conftest import HOSTILE

pydantic = pytest.importorskip("pydantic")
HTML = {"Accept": "text/html"}


class Order(pydantic.BaseModel):
    id: int


@pytest.fixture
def app_client(dsn: str, schema: str, queue: pgbaton.Queue,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    for name in ("PGBATON_DASHBOARD_TOKEN", "PGBATON_DASHBOARD_USER",
                 "PGBATON_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    app = pgbaton.App(dsn, schema=schema)

    @app.task(name=HOSTILE)
    def hostile(order: Order, note=None) -> None:
        pass

    @app.task(encrypt=True)
    def charge(card: str) -> None:
        pass

    with TestClient(create_app(dsn, schema=schema, app=app)) as test_client:
        yield test_client


def test_the_tasks_page_shows_each_tasks_args_as_json_schema(app_client: TestClient) -> None:
    page = app_client.get("/tasks", headers=HTML)
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert '"card": {' in text and '"type": "string"' in text
    assert '"title": "Order"' in text and '"required": [\n    "order"\n  ]' in text
    assert "encrypted" in page.text and "typed" in page.text
    assert HOSTILE not in page.text and "&lt;script&gt;" in page.text


def test_without_an_app_the_tasks_page_says_how_to_give_one(dsn: str, schema: str,
                                                              queue: pgbaton.Queue) -> None:
    with TestClient(create_app(dsn, schema=schema)) as client:
        assert "--app MODULE:APP" in client.get("/tasks", headers=HTML).text
