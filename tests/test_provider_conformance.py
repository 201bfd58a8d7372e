"""The provider conformance suite: every model adapter in ``planexec.models`` passes the same tests.

Each adapter runs on the wire, its official SDK talking to a server on 127.0.0.1: a scripted one
(``tests/http_fake.py``) answering in that provider's formats (``tests/provider_wires.py`` says
how each looks), and the published mock server llmock. The tests cover retries (429, 5xx, the wait
a server asks for, timeouts), streaming (deltas as they arrive, then the whole response), tool
calls, usage and cost, refusals, limits, closing, and the errors that are not retried.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal

import pytest

from planexec import UsageError
from planexec.models import (
    FailedAttempt,
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelRetryPolicy,
    ModelSettings,
    OutputSpec,
    Price,
    ProviderLimits,
    Providers,
    StreamDelta,
    ToolSpec,
    allow_model_requests,
    cost_of,
    failed_attempts_to,
    price_for,
    use_providers,
)
from tests.http_fake import FakeServer, Hang, Reply, Sse, serve
from tests.mock_servers import MockServer
from tests.provider_wires import FAST, WIRES, Adapter, Answer, Call, Wire

Mode = Literal["request", "stream"]
MODES = pytest.mark.parametrize("mode", ["request", "stream"])
TWICE = ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=0.01, jitter=0)
ONCE = ModelRetryPolicy(max_attempts=1)

SEARCH = ToolSpec(
    name="search",
    description="Search the web.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
ANSWER = OutputSpec(
    name="final answer",
    json_schema={"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
)
TWO_SEARCHES = (
    Call("call_p", "search", ('{"q": ', '"par', 'is"}')),
    Call("call_r", "search", ('{"q": "ro', 'me"}')),
)


def ask(*, output: OutputSpec | None = None, tools: tuple[ToolSpec, ...] = (), **settings: Any) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="system", content="be brief"), Message(role="user", content="hello")),
        output=output,
        tools=tools,
        settings=ModelSettings(**settings),
    )


# -- fixtures ------------------------------------------------------------------------------------

shared_server = pytest.fixture(serve, scope="module", name="shared_server")


@pytest.fixture
def server(shared_server: FakeServer) -> FakeServer:
    """The module's server (stopping one takes a while), as new for each test."""
    shared_server.reset()
    return shared_server


@pytest.fixture(params=WIRES, ids=[w.id for w in WIRES])
def wire(request: pytest.FixtureRequest) -> Wire:
    found: Wire = request.param
    return found


@pytest.fixture(autouse=True)
def live(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Model requests allowed (to 127.0.0.1 only), with no provider settings from outside."""
    for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


Make = Callable[..., Adapter]


@pytest.fixture
async def make(server: FakeServer, wire: Wire) -> AsyncIterator[Make]:
    """Build ``wire``'s adapter talking to the server, and close it afterwards."""
    built: list[Adapter] = []

    def build(**options: Any) -> Adapter:
        built.append(wire.model(server.url, **options))
        return built[-1]

    yield build
    for model in built:
        await model.aclose()


def scripted(wire: Wire, answer: Answer, mode: Mode) -> Reply:
    return wire.whole(answer) if mode == "request" else wire.stream(answer)


async def reply_to(model: Adapter, request: ModelRequest, mode: Mode) -> tuple[list[StreamDelta], ModelResponse]:
    """The deltas (none when not streamed) and the whole response."""
    if mode == "request":
        return [], await model.request(request)
    items = [item async for item in model.stream(request)]
    *deltas, last = items
    assert isinstance(last, ModelResponse)
    assert all(isinstance(d, StreamDelta) for d in deltas)
    return deltas, last  # type: ignore[return-value]


async def consume(model: Adapter, request: ModelRequest, into: list[StreamDelta | ModelResponse]) -> None:
    async for item in model.stream(request):
        into.append(item)


def sent(server: FakeServer, index: int = -1) -> dict[str, Any]:
    body = server.requests[index].body
    assert isinstance(body, dict)
    return body


# -- streaming -----------------------------------------------------------------------------------


async def test_text_streams_in_pieces_as_it_arrives_then_the_whole_response(
    server: FakeServer, wire: Wire, make: Make
) -> None:
    gate = threading.Event()
    answer = Answer(text=("Hel", "lo, ", "world"))
    server.reply(wire.stream(answer, gate=gate))
    # A short client timeout: were the stream buffered, the gated piece would never be read in time.
    model = make(timeout=5.0)
    items: list[StreamDelta | ModelResponse] = []
    async for item in model.stream(ask()):
        if not items:
            assert isinstance(item, StreamDelta)
            gate.set()
        items.append(item)

    *deltas, last = items
    assert deltas == [StreamDelta(text=p) for p in answer.text]
    assert isinstance(last, ModelResponse)
    assert (last.text, last.finish_reason, last.tool_calls) == ("Hello, world", "stop", ())
    assert last.usage == answer.neutral_usage()
    assert sent(server)["stream"] is True


async def test_a_stream_is_retried_while_nothing_was_passed_on(server: FakeServer, wire: Wire, make: Make) -> None:
    server.reply(
        wire.error(429, "slow down", {"retry-after": "0"}),
        wire.error(503, "busy"),
        wire.before_output(),
        wire.stream(Answer(text=("ok",))),
    )
    items: list[StreamDelta | ModelResponse] = []
    await consume(make(retry=ModelRetryPolicy(max_attempts=4, initial_delay=0, max_delay=0.01)), ask(), items)
    assert items[0] == StreamDelta(text="ok")
    assert isinstance(items[-1], ModelResponse)
    assert len(server.requests) == 4
    assert all(sent(server, i)["stream"] is True for i in range(4))


async def test_a_stream_that_breaks_after_a_delta_is_not_retried(server: FakeServer, wire: Wire, make: Make) -> None:
    opening = wire.cut(Answer(text=("Hel",)))
    server.reply(Sse([*opening.events, wire.broken("the server fell over")]), wire.stream(Answer(text=("never",))))
    seen: list[StreamDelta | ModelResponse] = []
    with pytest.raises(ModelCallError, match="the server fell over") as info:
        await consume(make(), ask(), seen)
    assert info.value.retryable  # the caller may ask again; the stream itself cannot go on
    assert seen == [StreamDelta(text="Hel")]
    assert len(server.requests) == 1


async def test_a_stream_cut_off_before_its_end_is_a_retryable_error(server: FakeServer, wire: Wire, make: Make) -> None:
    server.reply(wire.cut(Answer(text=("Hel",))), wire.stream(Answer(text=("never",))))
    seen: list[StreamDelta | ModelResponse] = []
    with pytest.raises(ModelCallError) as info:
        await consume(make(), ask(), seen)
    assert info.value.retryable
    assert seen == [StreamDelta(text="Hel")]
    assert len(server.requests) == 1


async def test_a_stream_holds_its_slot_until_its_last_event(server: FakeServer, wire: Wire, make: Make) -> None:
    gate = threading.Event()
    streams, limit = 5, 2
    server.reply(*(wire.stream(Answer(text=("first ", "rest")), gate=gate) for _ in range(streams)))
    model = make()
    providers = Providers.default().with_limits(model.limits_key, ProviderLimits(max_concurrency=limit))
    texts: list[str] = []

    async def one() -> None:
        with use_providers(providers):
            texts.append((await reply_to(model, ask(), "stream"))[1].text)

    tasks = [asyncio.create_task(one()) for _ in range(streams)]
    try:
        for _ in range(500):  # until the first streams are open (5 s at most)
            if len(server.requests) >= limit:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # time enough for more requests, were the slots given back early
        assert len(server.requests) == limit, "more streams were opened than the limit allows"
        assert server.open_streams == limit
    finally:
        gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
    assert server.most_open_streams == limit
    assert texts == ["first rest"] * streams


async def test_a_stream_given_up_early_gives_its_slot_back(server: FakeServer, wire: Wire, make: Make) -> None:
    gate = threading.Event()
    server.reply(*(wire.stream(Answer(text=("first ", "rest")), gate=gate) for _ in range(2)))
    model = make()
    providers = Providers.default().with_limits(model.limits_key, ProviderLimits(max_concurrency=1))
    try:
        with use_providers(providers):
            for _ in range(2):
                stream = model.stream(ask())
                async for _item in stream:
                    break
                await stream.aclose()  # type: ignore[attr-defined]
        assert len(server.requests) == 2
    finally:
        gate.set()


# -- tool calls ----------------------------------------------------------------------------------


@MODES
async def test_several_tool_calls_in_one_reply(server: FakeServer, wire: Wire, make: Make, mode: Mode) -> None:
    answer = Answer(calls=TWO_SEARCHES, stop="tool_calls")
    server.reply(scripted(wire, answer, mode))
    deltas, response = await reply_to(make(), ask(tools=(SEARCH,)), mode)
    assert deltas == []  # arguments are not text
    assert response.tool_calls == tuple(c.neutral() for c in TWO_SEARCHES)
    assert (response.finish_reason, response.text) == ("tool_calls", "")
    assert len(sent(server)["tools"]) == 1  # offered in the provider's own shape


async def test_text_then_tool_calls_in_one_stream(server: FakeServer, wire: Wire, make: Make) -> None:
    answer = Answer(text=("Look", "ing."), calls=TWO_SEARCHES, stop="tool_calls")
    server.reply(wire.stream(answer))
    deltas, response = await reply_to(make(), ask(tools=(SEARCH,)), "stream")
    assert deltas == [StreamDelta(text="Look"), StreamDelta(text="ing.")]
    assert (response.text, response.finish_reason) == ("Looking.", "tool_calls")
    assert response.tool_calls == tuple(c.neutral() for c in TWO_SEARCHES)


@pytest.mark.parametrize(("mode", "arguments"), [("request", "[1, 2]"), ("stream", "[1, 2]"), ("stream", '{"q": "p')])
async def test_arguments_that_are_not_a_json_object_fail_the_call(
    server: FakeServer, wire: Wire, make: Make, mode: Mode, arguments: str
) -> None:
    answer = Answer(calls=(Call("call_1", "search", (arguments[:3], arguments[3:])),), stop="tool_calls")
    server.reply(scripted(wire, answer, mode), scripted(wire, answer, mode))
    with pytest.raises(ModelCallError, match="'search'") as info:
        await reply_to(make(), ask(tools=(SEARCH,)), mode)
    assert not info.value.retryable
    assert len(server.requests) == 1


# -- usage and cost ------------------------------------------------------------------------------


@MODES
async def test_usage_and_cost(server: FakeServer, wire: Wire, make: Make, mode: Mode) -> None:
    answer = Answer(text=("ok",), usage=(1200, 80, 1000))
    server.reply(scripted(wire, answer, mode))
    _, response = await reply_to(make(), ask(), mode)
    assert response.usage == answer.neutral_usage()
    price = price_for(wire.model_id)
    assert price is not None
    assert response.cost == cost_of(response.usage, price)
    assert response.cost == pytest.approx(
        (200 * price.input + 1000 * (price.cached_input or 0) + 80 * price.output) / 1e6
    )


@MODES
async def test_a_price_given_to_the_model_prices_its_calls(
    server: FakeServer, wire: Wire, make: Make, mode: Mode
) -> None:
    price = Price(input=1.0, output=2.0)
    server.reply(scripted(wire, Answer(text=("ok",), usage=(100, 10, 0)), mode))
    _, response = await reply_to(make(price=price), ask(), mode)
    assert response.cost == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6)


# -- refusals ------------------------------------------------------------------------------------


@MODES
async def test_a_refusal(server: FakeServer, wire: Wire, make: Make, mode: Mode) -> None:
    server.reply(scripted(wire, Answer(refusal="I can't help with that.", stop="refusal"), mode))
    deltas, response = await reply_to(make(), ask(output=ANSWER), mode)
    assert deltas == []
    assert (response.refusal, response.finish_reason, response.parsed) == ("I can't help with that.", "refusal", None)


# -- limits --------------------------------------------------------------------------------------


@MODES
async def test_a_reply_cut_at_its_token_cap_finishes_with_length(
    server: FakeServer, wire: Wire, make: Make, mode: Mode
) -> None:
    server.reply(scripted(wire, Answer(text=("The answer ", "is"), stop="length"), mode))
    _, response = await reply_to(make(), ask(max_tokens=5), mode)
    assert (response.text, response.finish_reason, response.refusal) == ("The answer is", "length", None)
    assert sent(server)[wire.max_tokens_field] == 5


@MODES
async def test_a_context_too_long_is_not_retried(server: FakeServer, wire: Wire, make: Make, mode: Mode) -> None:
    server.reply(wire.context_too_long(), scripted(wire, Answer(text=("never",)), mode))
    with pytest.raises(ModelCallError) as info:
        await reply_to(make(), ask(), mode)
    assert (info.value.status, info.value.retryable, info.value.provider) == (400, False, wire.provider)
    assert "context length" in str(info.value) or "prompt is too long" in str(info.value)
    assert len(server.requests) == 1


# -- retries -------------------------------------------------------------------------------------


@MODES
async def test_a_rate_limit_is_retried(server: FakeServer, wire: Wire, make: Make, mode: Mode) -> None:
    server.reply(
        wire.error(429, "Rate limit reached", {"retry-after": "0"}), scripted(wire, Answer(text=("ok",)), mode)
    )
    _, response = await reply_to(make(), ask(), mode)
    assert response.text == "ok"
    assert len(server.requests) == 2
    assert sent(server, 0) == sent(server, 1)


@pytest.mark.parametrize(
    ("headers", "wait"), [({"retry-after": "0.05"}, 0.05), ({"retry-after-ms": "30", "retry-after": "2"}, 0.03)]
)
async def test_the_wait_a_rate_limit_asks_for_is_honoured(
    server: FakeServer, wire: Wire, make: Make, headers: dict[str, str], wait: float
) -> None:
    server.reply(wire.error(429, "Rate limit reached", headers), wire.whole(Answer(text=("ok",))))
    failed: list[FailedAttempt] = []
    model = make(retry=ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=1, jitter=0))
    with failed_attempts_to(failed.append):
        assert (await model.request(ask())).text == "ok"
    assert [(f.attempt, f.error.status, f.retry_in) for f in failed] == [(1, 429, wait)]


@pytest.mark.parametrize(
    ("headers", "wait"),
    [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5), ({}, None)],
)
async def test_a_rate_limit_says_how_long_to_wait(
    server: FakeServer, wire: Wire, make: Make, headers: dict[str, str], wait: float | None
) -> None:
    server.reply(wire.error(429, "Rate limit reached", headers))
    with pytest.raises(ModelCallError) as info:
        await make(retry=ONCE).request(ask())
    e = info.value
    assert (e.status, e.retryable, e.retry_after, e.provider) == (429, True, wait, wire.provider)


@pytest.mark.parametrize("status", [500, 502, 503, 529])
async def test_server_errors_are_retried(server: FakeServer, wire: Wire, make: Make, status: int) -> None:
    server.reply(wire.error(status, "busy"), wire.whole(Answer(text=("recovered",))))
    assert (await make().request(ask())).text == "recovered"
    assert len(server.requests) == 2


async def test_retries_give_up_after_the_policys_attempts(server: FakeServer, wire: Wire, make: Make) -> None:
    server.reply(*(wire.error(502, "bad gateway") for _ in range(FAST.max_attempts)), wire.whole(Answer()))
    with pytest.raises(ModelCallError) as info:
        await make().request(ask())
    assert (info.value.status, info.value.retryable) == (502, True)
    assert "502" in str(info.value)
    assert len(server.requests) == FAST.max_attempts


@MODES
async def test_a_timeout_is_retried_then_reported(server: FakeServer, wire: Wire, make: Make, mode: Mode) -> None:
    server.reply(Hang(), Hang())
    with pytest.raises(ModelCallError, match="timed out") as info:
        await reply_to(make(timeout=0.2, retry=TWICE), ask(), mode)
    assert (info.value.retryable, info.value.status) == (True, None)
    assert len(server.requests) == 2


async def test_a_stream_that_stalls_times_out(server: FakeServer, wire: Wire, make: Make) -> None:
    stall = threading.Event()
    server.reply(wire.stream(Answer(text=("Hel", "lo")), gate=stall))
    seen: list[StreamDelta | ModelResponse] = []
    try:
        with pytest.raises(ModelCallError, match="timed out") as info:
            await asyncio.wait_for(consume(make(timeout=0.3), ask(), seen), 10)
    finally:
        stall.set()
    assert info.value.retryable
    assert seen == [StreamDelta(text="Hel")]


async def test_a_per_call_timeout_overrides_the_models(server: FakeServer, wire: Wire, make: Make) -> None:
    server.reply(Hang())
    with pytest.raises(ModelCallError, match="timed out"):
        await make(timeout=60.0, retry=ONCE).request(ask(timeout=0.2))


async def test_a_refused_connection_is_retryable(wire: Wire) -> None:
    dead = FakeServer()
    url = dead.url
    dead.close()
    async with wire.model(url, retry=ONCE) as model:
        with pytest.raises(ModelCallError) as info:
            await model.request(ask())
    assert (info.value.retryable, info.value.status) == (True, None)


# -- errors that are not retried -----------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_is_not_retried_and_names_the_key(
    server: FakeServer, wire: Wire, make: Make, status: int
) -> None:
    server.reply(wire.error(status, "invalid api key"), wire.whole(Answer(text=("never",))))
    model = make()
    with pytest.raises(ModelCallError) as info:
        await model.request(ask())
    message = str(info.value)
    assert message.startswith(f"{model.name} answered {status}")
    assert message.endswith(f"the server refused the API key: check the API key in {wire.key_env}")
    assert (info.value.status, info.value.retryable, info.value.provider) == (status, False, wire.provider)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 404])
@MODES
async def test_a_bad_request_is_not_retried(
    server: FakeServer, wire: Wire, make: Make, mode: Mode, status: int
) -> None:
    server.reply(wire.error(status, "Invalid schema for the tool"), scripted(wire, Answer(text=("never",)), mode))
    with pytest.raises(ModelCallError) as info:
        await reply_to(make(), ask(), mode)
    assert (info.value.status, info.value.retryable) == (status, False)
    assert "Invalid schema for the tool" in str(info.value)
    assert len(server.requests) == 1


async def test_blocked_requests_never_reach_the_server(server: FakeServer, wire: Wire, make: Make) -> None:
    model = make()
    allow_model_requests(False)
    with pytest.raises(UsageError, match="blocked"):
        await model.request(ask())
    with pytest.raises(UsageError, match="blocked"):
        await consume(model, ask(), [])
    assert server.requests == []


# -- closing -------------------------------------------------------------------------------------


async def settled(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether ``check`` holds within ``seconds``, looked at every 10 ms."""
    for _ in range(int(seconds * 100)):
        if check():
            return True
        await asyncio.sleep(0.01)
    return check()


async def test_closing_a_model_closes_its_connections_and_leaves_no_task(wire: Wire) -> None:
    own = FakeServer()
    try:
        own.reply(wire.stream(Answer(text=("one",))), wire.whole(Answer(text=("two",))))
        before = asyncio.all_tasks()
        async with wire.model(own.url) as model:
            assert (await reply_to(model, ask(), "stream"))[1].text == "one"
            assert (await model.request(ask())).text == "two"
            assert own.open_connections >= 1  # kept alive for the next request
        assert await settled(lambda: own.open_connections == 0), "a connection was left open"
        assert asyncio.all_tasks() == before
    finally:
        own.close()


def test_one_model_in_several_event_loops_leaves_nothing_open(server: FakeServer, wire: Wire) -> None:
    """As with ``Agent.run_sync`` called again: each loop gets its own client, closed as the loop ends."""
    model = wire.model(server.url)
    server.reply(*(wire.whole(Answer(text=(f"answer {n}",))) for n in range(3)))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        answers = [asyncio.run(model.request(ask())).text for _ in range(3)]
        gc.collect()
    assert answers == ["answer 0", "answer 1", "answer 2"]
    assert [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []


async def test_a_closed_model_opens_a_new_client_when_asked_again(server: FakeServer, wire: Wire) -> None:
    server.reply(wire.whole(Answer(text=("one",))), wire.whole(Answer(text=("two",))))
    model = wire.model(server.url)
    async with model:
        assert (await model.request(ask())).text == "one"
    assert (await model.request(ask())).text == "two"
    await model.aclose()


async def test_a_client_passed_in_is_used_without_its_retries_and_left_open(server: FakeServer, wire: Wire) -> None:
    client = wire.client(server.url, "sk-mine")
    server.reply(wire.error(500, "boom"), wire.whole(Answer(text=("one",))))
    try:
        async with wire.model("", client=client, retry=ONCE, api_key=None) as model:
            with pytest.raises(ModelCallError):
                await model.request(ask())
            assert (await model.request(ask())).text == "one"
        assert not client.is_closed()
    finally:
        await client.close()
    assert len(server.requests) == 2  # the client's own retries are off
    for r in server.requests:  # the client's own way of sending its key
        assert "sk-mine" in r.headers.get("x-api-key", "") + r.headers.get("authorization", "")


# -- a published mock server ---------------------------------------------------------------------


def queue(llmock: MockServer, *behaviors: dict[str, Any]) -> None:
    llmock.post("/_llmock/scenario", {"behaviors": list(behaviors)})


@MODES
async def test_llmock_rate_limits_are_retried_after_the_wait_asked(llmock: MockServer, wire: Wire, mode: Mode) -> None:
    queue(llmock, {"type": "fail", "status": 429, "retry_after": 0.2, "times": 2}, {"type": "reply", "text": "hello"})
    failed: list[FailedAttempt] = []
    retry = ModelRetryPolicy(max_attempts=3, initial_delay=0, max_delay=1, jitter=0)
    async with wire.model(llmock.url + wire.llmock_prefix, retry=retry) as model:
        with failed_attempts_to(failed.append):
            _, response = await reply_to(model, ask(), mode)
    assert response.text == "hello"
    assert [(f.error.status, f.retry_in) for f in failed] == [(429, 0.2), (429, 0.2)]
    statuses = [r["status"] for r in llmock.get("/_llmock/requests")["requests"]]
    assert statuses == [429, 429, 200]
    judged = llmock.get("/_llmock/verdict")
    assert judged["passed"] is True, judged["findings"]


async def test_llmock_context_overflow_is_not_retried(llmock: MockServer, wire: Wire) -> None:
    queue(llmock, {"type": "fail", "status": 400, "code": "context_length_exceeded", "message": "prompt is too long"})
    async with wire.model(llmock.url + wire.llmock_prefix) as model:
        with pytest.raises(ModelCallError, match="prompt is too long") as info:
            await model.request(ask())
    assert (info.value.status, info.value.retryable) == (400, False)
    assert len(llmock.get("/_llmock/requests")["requests"]) == 1
