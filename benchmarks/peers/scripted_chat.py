"""A scripted LangChain chat model for the LangGraph peers.

LangChain's fake chat models cannot bind tools, and every graph here needs tools: the agents call
them and ``with_structured_output`` is built on them. ``ScriptedChatModel`` is a real
``BaseChatModel``: ``bind_tools`` converts the tools to the OpenAI format as provider integrations
do, so a reply goes through LangChain's own message, tool-call and output-parsing machinery.

Each reply is ``responder(messages, tool_names)``, a function of the request alone (so one model
serves many concurrent runs and a resumed process answers as the first one would). The model
sleeps ``latency`` seconds before answering, reports token usage estimated at 4 characters per
token, and records what each call was sent.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, PrivateAttr

__all__ = ["CHARS_PER_TOKEN", "ModelCall", "Responder", "ScriptedChatModel", "message_chars", "tool_call"]

CHARS_PER_TOKEN = 4

Responder = Callable[[Sequence[BaseMessage], Sequence[str]], AIMessage]
"""Answers one call: the messages sent and the names of the tools bound to the model."""

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ModelCall:
    """What one call sent: the tools bound (by name), the characters of message text, and the
    characters of the tool and output schemas sent beside the messages (as JSON)."""

    tools: tuple[str, ...]
    chars: int
    schema_chars: int = 0
    prompt: str = ""
    """The request as a provider's prompt cache sees it: the schemas, then each message's role
    and text (see ``benchmarks.side.economy.prefix_share``)."""


def message_chars(messages: Sequence[BaseMessage]) -> int:
    """Characters of message text, the measure planexec's ``ModelRequest.chars`` also uses."""
    total = 0
    for m in messages:
        content = m.content
        if isinstance(content, str):
            total += len(content)
        else:
            total += sum(len(str(part)) for part in content)
    return total


def tool_call(name: str, args: dict[str, Any]) -> AIMessage:
    """A reply that calls one tool (or fills one structured-output schema)."""
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{next(_ids)}"}])


class ScriptedChatModel(BaseChatModel):
    """A chat model whose replies come from ``responder``; see the module docstring."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    responder: Responder
    latency: float = 0.0
    _calls: list[ModelCall] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    @property
    def calls(self) -> list[ModelCall]:
        return self._calls

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        specs = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=specs, **kwargs)

    def _reply(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> ChatResult:
        specs = kwargs.get("tools", ())
        names = tuple(spec["function"]["name"] for spec in specs)
        chars = message_chars(messages)
        schema_chars = len(json.dumps(specs, separators=(",", ":"))) if specs else 0
        schemas = json.dumps(specs, separators=(",", ":")) if specs else ""
        prompt = schemas + "".join(f"<{m.type}>{m.content}" for m in messages)
        self._calls.append(ModelCall(tools=names, chars=chars, schema_chars=schema_chars, prompt=prompt))
        reply = self.responder(messages, names)
        out_chars = len(reply.content) if isinstance(reply.content, str) else 0
        out_chars += sum(len(str(c["args"])) for c in reply.tool_calls)
        tokens_in = max(1, chars // CHARS_PER_TOKEN)
        tokens_out = max(1, out_chars // CHARS_PER_TOKEN)
        reply.usage_metadata = {
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        }
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the benchmarks run the graphs asynchronously")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        return self._reply(messages, kwargs)
