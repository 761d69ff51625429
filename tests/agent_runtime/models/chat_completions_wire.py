"""Bodies of OpenAI's Chat Completions wire format, which the openai,
openai-compatible, xai and groq drivers speak: a completion and a streamed chunk."""

from __future__ import annotations

from typing import Any


def completion(content: str | None = "Hello there.", *, tool_calls: list[Any] | None = None,
               usage: tuple[int, int] = (12, 5), model: str = "test-model") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                      "total_tokens": sum(usage)}}


def chunk(delta: dict[str, Any] | None = None, *, finish: str | None = None,
          usage: tuple[int, int] | None = None, model: str = "test-model") -> dict[str, Any]:
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                            "model": model,
                            "choices": [] if delta is None else
                            [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                         "total_tokens": sum(usage)}
    return body
