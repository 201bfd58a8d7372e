"""The OpenAPI document of ``planexec serve`` is its contract: every status and error body each
operation answers with is documented (every answer the serve tests provoke is checked against it,
see ``tests/serve_support.check_documented``), the bearer scheme is declared, the formats of ids,
cursors, event ids and budget caps are given so that what fits them is taken and what does not
is refused with a documented status, and a 405 names every method its path serves."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from planexec.runtime import Budget
from planexec.server import openapi_document
from tests.serve_support import ADD_PLAN, ASK, Server, api_document, operation_of, run_status, wait_for, write_agent

HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("contract")
    agents = [
        write_agent(folder, "adder", [ADD_PLAN, {"answer": "5"}]),
        write_agent(folder, "asker", [ASK, ADD_PLAN, {"answer": "5"}]),
    ]
    served = Server(folder, agents).start()
    yield served
    served.kill()


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, by_method in api_document()["paths"].items():
        for method, operation in by_method.items():
            yield method.upper(), path, operation


def refused(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


def start(api: httpx.Client, agent: str = "adder", **extra: Any) -> dict[str, Any]:
    response = api.post("/v1/runs", json={"agent": agent, "goal": "add 2 and 3", **extra})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


# -- the document ---------------------------------------------------------------------------------


def test_the_served_document_is_the_one_the_command_prints(api: httpx.Client) -> None:
    assert api.get("/v1/openapi.json").json() == openapi_document()


def test_the_bearer_scheme_is_declared_and_required_by_every_v1_operation() -> None:
    scheme = api_document()["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for method, path, operation in operations():
        expected: list[dict[str, list[str]]] = [] if path == "/healthz" else [{"bearer": []}]
        assert operation["security"] == expected, (method, path)
        if path != "/healthz":
            assert "WWW-Authenticate" in operation["responses"]["401"]["headers"], (method, path)


def test_every_refusal_is_documented_with_the_error_body() -> None:
    document = api_document()
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert set(schemas["ErrorBody"]["properties"]) == {"error"}
    assert set(schemas["ErrorDetail"]["properties"]) == {"code", "message", "problems"}
    assert set(schemas["ProblemItem"]["properties"]) == {"where", "message", "code"}
    error_body = {"$ref": "#/components/schemas/ErrorBody"}
    for method, path, operation in operations():
        responses = operation["responses"]
        expected = {"413", "503"} | ({"401"} if path.startswith("/v1/") else set())
        if "{run_id}" in path:
            expected |= {"400", "404", "422"}
        if "requestBody" in operation:
            expected |= {"400", "413", "422"}
        assert expected <= set(responses), (method, path, sorted(responses))
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                assert response["content"]["application/json"]["schema"] == error_body, (method, path, status)
                assert re.search(r"`[a-z_]+`", response["description"]), (method, path, status)
        assert responses["503"]["content"]["text/plain"]["schema"] == {"type": "string"}


def test_ids_cursors_event_ids_and_budget_caps_have_their_formats() -> None:
    for method, path, operation in operations():
        for parameter in operation.get("parameters", ()):
            schema = parameter["schema"]
            assert "anyOf" not in schema, (method, path, parameter["name"])  # a parameter is text, never null
            if parameter["in"] == "path":
                assert schema["pattern"] == r"^(?!\.\.?$)[A-Za-z0-9._:-]{1,128}$", (method, path)
    listing = {p["name"]: p["schema"] for p in api_document()["paths"]["/v1/runs"]["get"]["parameters"]}
    assert listing["cursor"]["pattern"].startswith("^-?[0-9]")
    stream = api_document()["paths"]["/v1/runs/{run_id}/events/stream"]["get"]["parameters"]
    assert {p["name"]: p["schema"].get("pattern") for p in stream}["last-event-id"] == "^[0-9]{1,20}$"

    caps = api_document()["components"]["schemas"]["BudgetCaps"]
    assert caps["additionalProperties"] is False
    fields = {f.name: str(f.type) for f in dataclasses.fields(Budget)}
    assert list(caps["properties"]) == list(fields)
    for name, schema in caps["properties"].items():
        kind = "integer" if fields[name] == "int | None" else "number"
        assert schema["anyOf"][0]["type"] == kind, name
        assert schema["anyOf"][0]["minimum"] == 0, name
        assert schema["anyOf"][1] == {"type": "null"}, name
    start_run = api_document()["components"]["schemas"]["StartRun"]
    assert start_run["properties"]["budget"]["$ref"] == "#/components/schemas/BudgetCaps"
    assert "pattern" in start_run["properties"]["goal"]


def test_creating_a_run_links_to_what_can_be_done_with_it() -> None:
    paths = api_document()["paths"]
    created = paths["/v1/runs"]["post"]["responses"]["201"]["links"]
    ids = {op["operationId"] for _, _, op in operations()}
    targets = {link["operationId"] for link in created.values()}
    assert targets == {"get_run", "get_events", "stream_events", "cancel_run", "resume_run", "tell_run", "fork_run"}
    assert targets <= ids
    assert all(link["parameters"] == {"run_id": "$response.body#/run_id"} for link in created.values())
    answered = paths["/v1/runs/{run_id}"]["get"]["responses"]["200"]["links"]["AnswerQuestion"]
    assert answered["operationId"] == "answer_question"
    assert answered["parameters"]["question_id"] == "$response.body#/questions/0/question_id"


# -- the server answers as documented ----------------------------------------------------------------


def test_each_refusal_code_comes_with_a_documented_status(server: Server, api: httpx.Client) -> None:
    # every answer below is also checked against the document by the client (check_documented)
    run_id = start(api)["run_id"]
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    asking = start(api, "asker")["run_id"]
    question_id = wait_for(run_status(api, asking, "waiting"), what="the question")["questions"][0]["question_id"]
    headers = {"content-type": "application/json"}

    for bad in ("%2E", "%2E%2E", "a%20b", "x%0A", "é", "r" * 129):
        refused(api.get(f"/v1/runs/{bad}"), 400, "bad_id")
        refused(api.post(f"/v1/runs/{bad}/cancel"), 400, "bad_id")
        refused(api.post(f"/v1/runs/{bad}/tell", json={"text": "news"}), 400, "bad_id")
        refused(api.post(f"/v1/runs/{asking}/questions/{bad}/answer", json={"decision": "approve"}), 400, "bad_id")
    refused(api.get("/v1/runs", params={"cursor": "not a cursor"}), 400, "bad_cursor")
    refused(api.post("/v1/runs", content=b"{", headers=headers), 400, "bad_json")
    refused(api.post(f"/v1/runs/{run_id}/fork", content=b"[1,", headers=headers), 400, "bad_json")
    for last in (b"x", "１２".encode(), b"1" * 21, b"-1"):
        refused(api.get(f"/v1/runs/{run_id}/events/stream", headers={b"Last-Event-ID": last}), 400, "bad_event_id")
    with server.client(token=None) as anonymous:
        for method, path, _ in operations():
            if path.startswith("/v1/"):
                concrete = path.replace("{run_id}", run_id).replace("{question_id}", question_id)
                refused(anonymous.request(method, concrete), 401, "unauthorized")
    refused(api.get("/v1/runs/no-such-run/events"), 404, "unknown_run")
    refused(api.post("/v1/runs/no-such-run/resume"), 404, "unknown_run")
    refused(api.post("/v1/runs", json={"agent": "nobody", "goal": "add"}), 404, "unknown_agent")
    refused(api.post(f"/v1/runs/{run_id}/fork", json={"at": 1, "agent": "nobody"}), 404, "unknown_agent")
    unknown = api.post(f"/v1/runs/{asking}/questions/q-unknown/answer", json={"decision": "approve"})
    assert "q-unknown" in refused(unknown, 404, "unknown_question")["message"]
    first = api.post("/v1/runs", json={"agent": "adder", "goal": "add", "idempotency_key": "contract-1"})
    assert first.status_code == 201
    other = api.post("/v1/runs", json={"agent": "adder", "goal": "other", "idempotency_key": "contract-1"})
    refused(other, 409, "idempotency_conflict")
    refused(api.post(f"/v1/runs/{run_id}/cancel"), 409, "finished")
    refused(api.post(f"/v1/runs/{run_id}/resume"), 409, "finished")
    refused(api.post(f"/v1/runs/{run_id}/tell", json={"text": "news"}), 409, "finished")
    refused(api.post(f"/v1/runs/{run_id}/fork", json={"at": done["events"] + 1}), 422, "invalid")
    refused(api.post("/v1/runs", content=b'{"agent": "adder", "goal": "' + b"x" * 1_100_000 + b'"}'), 413, "too_large")
    refused(api.post(f"/v1/runs/{asking}/resume"), 409, "waiting")
    error = refused(api.post(f"/v1/runs/{asking}/tell", json={"text": " \t\u3000\x1c"}), 422, "invalid")
    assert error["problems"][0]["where"] == "text"
    error = refused(api.get("/v1/runs", params={"since": "nan", "limit": "0"}), 422, "invalid")
    assert {p["where"] for p in error["problems"]} == {"query.since", "query.limit"}


@pytest.mark.parametrize("path", sorted(api_document()["paths"]))
def test_a_405_names_every_method_its_path_serves(api: httpx.Client, path: str) -> None:
    concrete = path.replace("{run_id}", "r1").replace("{question_id}", "q1")
    served = {method.upper() for method in api_document()["paths"][path]}
    for method in HTTP_METHODS:
        if method in served:
            continue
        response = api.request(method, concrete)
        refused(response, 405, "method_not_allowed")
        allowed = {m.strip() for m in response.headers["allow"].split(",")}
        assert allowed - {"HEAD"} == served, (method, path, response.headers["allow"])
        assert operation_of(method, concrete) is None


def test_a_405_on_the_page_files_names_their_methods(server: Server) -> None:
    with server.client(token=None) as anonymous:
        response = anonymous.post("/assets/app.js")
    refused(response, 405, "method_not_allowed")
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "HEAD"}


# -- what fits the formats is taken ---------------------------------------------------------------


def test_budget_caps_of_the_documented_kinds_are_taken(api: httpx.Client) -> None:
    caps = {"steps": 3, "tool_calls": 10.0, "model_calls": 2**53 - 1, "cost": 2, "wall_time": None, "replans": 0}
    run_id = start(api, budget=caps)["run_id"]
    done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    assert done["stop"]["kind"] == "goal_met", done["stop"]
    started = api.get(f"/v1/runs/{run_id}/events").json()["events"][0]["event"]
    assert started["kind"] == "run_started"
    assert {name: started["budget"][name] for name in caps} == {**caps, "tool_calls": 10, "cost": 2.0}


@pytest.mark.parametrize(
    ("caps", "where", "message"),
    [
        ({"steps": True}, "budget.steps", "whole number"),
        ({"steps": "3"}, "budget.steps", "whole number"),
        ({"steps": 2.5}, "budget.steps", "whole number"),
        ({"steps": 2**53}, "budget.steps", "whole number"),
        ({"cost": -1}, "budget.cost", "0 or more"),
        ({"cost": "1"}, "budget.cost", "0 or more"),
        ({"nope": 1}, "budget.nope", "'nope' is not a budget cap: model_calls, input_tokens"),
    ],
)
def test_budget_caps_of_other_kinds_are_refused(
    api: httpx.Client, caps: dict[str, Any], where: str, message: str
) -> None:
    error = refused(api.post("/v1/runs", json={"agent": "adder", "goal": "add", "budget": caps}), 422, "invalid")
    assert [p["where"] for p in error["problems"]] == [where]
    assert message in error["problems"][0]["message"]


@pytest.mark.parametrize("body", [{"constraint": 1}, {"constraint": "true"}, {"text": 5}])
def test_values_of_another_type_are_not_taken_for_the_documented_one(api: httpx.Client, body: dict[str, Any]) -> None:
    run_id = start(api)["run_id"]
    wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    refused(api.post(f"/v1/runs/{run_id}/tell", json={"text": "news", **body}), 422, "invalid")


def test_any_cursor_of_the_documented_format_is_taken(api: httpx.Client) -> None:
    ids = {start(api, goal=f"add {n}")["run_id"] for n in range(3)}
    for run_id in ids:
        wait_for(run_status(api, run_id, "finished"), what="the run to finish")
    seen: list[str] = []
    cursor = None
    while True:
        page = api.get("/v1/runs", params={"limit": 1} | ({"cursor": cursor} if cursor else {}))
        assert page.status_code == 200, page.text
        seen += [r["run_id"] for r in page.json()["runs"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
        assert re.fullmatch(api_document()["paths"]["/v1/runs"]["get"]["parameters"][-1]["schema"]["pattern"], cursor)
    assert ids <= set(seen)
    assert len(seen) == len(set(seen))
    for made_up in ("0~", "1e300~AA", "-5.5~_-8", "99999999999999999999~cnVuLTE"):
        response = api.get("/v1/runs", params={"cursor": made_up})
        assert response.status_code == 200, (made_up, response.text)
    assert api.get("/v1/runs", params={"cursor": "0~"}).json()["runs"] == []
    for malformed in ("", "~", "1|x", "1~A", "nan~AA", "1~AA\n", "MTIzfHJ1bg"):
        refused(api.get("/v1/runs", params={"cursor": malformed}), 400, "bad_cursor")
