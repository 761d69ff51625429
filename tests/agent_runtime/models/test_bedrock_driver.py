"""The `bedrock` driver through the real engine: botocore's Stubber on a real
bedrock-runtime client for Converse (text, tool round trips, outputSchema,
usage, throttling with Retry-After, error bodies), and a local HTTP server
speaking the AWS event stream for ConverseStream and for a timeout."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.eventstream import EventStreamBuffer
from botocore.stub import Stubber
from fake_provider_server import (
    PROMPT,
    DriverRun,
    FakeProviderServer,
    aws_event_message,
    aws_event_stream_reply,
    driver_run,
    no_real_aws,
    ticket_tool,
)

from agent_runtime import RunStatus, tool
from agent_runtime.config import parse_config
from agent_runtime.errors import ConfigError
from agent_runtime.models import bedrock
from agent_runtime.models.retry import RetryPolicy

MODEL_ID = "anthropic.claude-test-v1:0"
MODEL = {"provider": "aws", "model": MODEL_ID}
CONFIG = {"providers": {"aws": {"driver": "bedrock", "region": "us-east-1"}}}


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Fake credentials, and no way to find real ones."""
    no_real_aws(monkeypatch, tmp_path)


class Stubbed:
    """A real bedrock-runtime client with a Stubber, remembering each call's params."""

    def __init__(self) -> None:
        self.client = boto3.client("bedrock-runtime", region_name="us-east-1",
                                   config=Config(retries={"total_max_attempts": 1}))
        self.stubber = Stubber(self.client)
        self.params: list[dict[str, Any]] = []
        self.client.meta.events.register("before-parameter-build.bedrock-runtime.Converse",
                                         self._capture)
        self.waits: list[float] = []

    def _capture(self, params: dict[str, Any], **_: Any) -> None:
        self.params.append(copy.deepcopy(params))

    async def _sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    def run(self, *, tools: list[Any] | None = None) -> DriverRun:
        adapter = bedrock.create_adapter("aws", parse_config({"version": "1.0", **CONFIG},
                                                             source="test"),
                                         client=self.client, retry=RetryPolicy(sleep=self._sleep))
        self.stubber.activate()
        return driver_run(CONFIG, tools=tools, models={"aws": adapter})


@pytest.fixture
def stubbed() -> Iterator[Stubbed]:
    stub = Stubbed()
    yield stub
    stub.stubber.assert_no_pending_responses()
    stub.stubber.deactivate()


def converse(*content: dict[str, Any], stop: str = "end_turn",
             usage: tuple[int, int] = (12, 5)) -> dict[str, Any]:
    return {"output": {"message": {"role": "assistant", "content": list(content)}},
            "stopReason": stop, "metrics": {"latencyMs": 100},
            "usage": {"inputTokens": usage[0], "outputTokens": usage[1],
                      "totalTokens": sum(usage)}}


def test_plain_text_with_system_blocks_and_usage_in_the_checkpoint(stubbed: Stubbed) -> None:
    stubbed.stubber.add_response("converse", converse({"text": "Hello there."}))
    run = stubbed.run()
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Hello there."
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}]
    assert run.consumed_tokens(result.run_id) == 17
    [params] = stubbed.params
    assert params["modelId"] == MODEL_ID
    assert params["system"] == [{"text": "Be brief."}]
    assert params["messages"] == [{"role": "user", "content": [{"text": "Say hello."}]}]


def test_a_tool_use_round_trip_answers_with_a_tool_result_of_the_same_id(
        stubbed: Stubbed) -> None:
    lookup_ticket, seen = ticket_tool()

    stubbed.stubber.add_response("converse", converse(
        {"toolUse": {"toolUseId": "tooluse_7", "name": "lookup_ticket",
                     "input": {"ticket_id": "T-1"}}}, stop="tool_use", usage=(20, 8)))
    stubbed.stubber.add_response("converse", converse({"text": "T-1 is open."}, usage=(40, 6)))
    run = stubbed.run(tools=[lookup_ticket])
    result = run.run({**PROMPT, "tools": ["lookup_ticket"]}, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "T-1 is open."
    assert seen == ["T-1"]
    first, second = stubbed.params
    spec = first["toolConfig"]["tools"][0]["toolSpec"]
    assert spec["name"] == "lookup_ticket"
    assert spec["inputSchema"]["json"]["required"] == ["ticket_id"]
    assistant, results = second["messages"][1:]
    assert assistant == {"role": "assistant", "content": [{"toolUse": {
        "toolUseId": "tooluse_7", "name": "lookup_ticket", "input": {"ticket_id": "T-1"}}}]}
    assert results == {"role": "user", "content": [{"toolResult": {
        "toolUseId": "tooluse_7", "content": [{"json": {"id": "T-1", "status": "open"}}],
        "status": "success"}}]}
    assert run.consumed_tokens(result.run_id) == 74


def test_output_schema_is_answered_through_a_forced_tool(stubbed: Stubbed) -> None:
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}},
              "required": ["approved"]}
    stubbed.stubber.add_response("converse", converse(
        {"toolUse": {"toolUseId": "tooluse_1", "name": "structured_output",
                     "input": {"approved": True}}}, stop="tool_use"))
    run = stubbed.run()
    result = run.run({**PROMPT, "outputSchema": schema}, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == {"approved": True}
    tool_config = stubbed.params[0]["toolConfig"]
    assert tool_config["toolChoice"] == {"tool": {"name": "structured_output"}}
    assert tool_config["tools"][0]["toolSpec"]["inputSchema"] == {"json": schema}


def test_throttling_is_retried_after_the_retry_after_it_names(stubbed: Stubbed) -> None:
    stubbed.stubber.add_client_error(
        "converse", service_error_code="ThrottlingException",
        service_message="Too many requests, please wait before trying again.",
        http_status_code=429, response_meta={"HTTPHeaders": {"retry-after": "2"}})
    stubbed.stubber.add_response("converse", converse({"text": "Hello after waiting."}))
    run = stubbed.run()
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Hello after waiting."
    assert stubbed.waits == [2.0]
    assert len(stubbed.params) == 2


def test_an_error_body_becomes_a_clear_run_failure(stubbed: Stubbed) -> None:
    stubbed.stubber.add_client_error(
        "converse", service_error_code="ValidationException",
        service_message="The provided model identifier is invalid.", http_status_code=400)
    run = stubbed.run()
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "ValidationException"}
    assert ('HTTP 400 ValidationException: "The provided model identifier is invalid."'
            in result.error["message"])
    assert stubbed.waits == []  # a client error is not retried


# -- ConverseStream and timeouts, against a local endpoint ------------------------


def endpoint_config(server: FakeProviderServer) -> dict[str, Any]:
    return {"providers": {"aws": {"driver": "bedrock", "region": "us-east-1",
                                  "baseURL": server.url}}}


def stream_events(*blocks: list[dict[str, Any]], stop: str = "end_turn",
                  usage: tuple[int, int] = (9, 3)) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"messageStart": {"role": "assistant"}}]
    for index, (start, *deltas) in enumerate(blocks):
        if start:
            events.append({"contentBlockStart": {"start": start, "contentBlockIndex": index}})
        events.extend({"contentBlockDelta": {"delta": delta, "contentBlockIndex": index}}
                      for delta in deltas)
        events.append({"contentBlockStop": {"contentBlockIndex": index}})
    events.append({"messageStop": {"stopReason": stop}})
    events.append({"metadata": {"usage": {"inputTokens": usage[0], "outputTokens": usage[1],
                                          "totalTokens": sum(usage)},
                                "metrics": {"latencyMs": 5}}})
    return events


def test_converse_stream_deltas_reach_the_text_channel_in_order(
        server: FakeProviderServer) -> None:
    server.add(aws_event_stream_reply(stream_events([{}, {"text": "Hel"}, {"text": "lo."}])))
    run = driver_run(endpoint_config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Hello."
    assert run.deltas() == ["Hel", "lo."]
    # the event log gets throttled counts, never the text: all 6 characters, no more
    assert sum(e.data["chars"] for e in run.events.events if e.type == "model.text.delta") == 6
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 9, "outputTokens": 3, "totalTokens": 12}]
    [request] = server.requests
    assert request.path.endswith("/converse-stream")
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256")


def test_a_streamed_tool_use_is_gathered_and_answered(server: FakeProviderServer) -> None:
    @tool
    def lookup_ticket(ticket_id: str) -> str:
        """Look up a ticket."""
        return f"{ticket_id} is open"

    start = {"toolUse": {"toolUseId": "tooluse_9", "name": "lookup_ticket"}}
    server.add(aws_event_stream_reply(stream_events(
                   [start, {"toolUse": {"input": '{"ticket_'}},
                    {"toolUse": {"input": 'id": "T-2"}'}}], stop="tool_use")),
               aws_event_stream_reply(stream_events([{}, {"text": "Open."}])))
    run = driver_run(endpoint_config(server), tools=[lookup_ticket], watch_text=True)
    result = run.run({**PROMPT, "tools": ["lookup_ticket"]}, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Open."
    [tool_result] = server.requests[1].body["messages"][2]["content"]
    assert tool_result == {"toolResult": {"toolUseId": "tooluse_9",
                                          "content": [{"text": "T-2 is open"}],
                                          "status": "success"}}


def test_missing_aws_credentials_are_refused_before_any_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    run = driver_run(CONFIG)
    with pytest.raises(ConfigError, match="AWS_ACCESS_KEY_ID") as refused:
        run.run(PROMPT, model=MODEL)
    assert "'aws'" in str(refused.value)


def test_a_missing_region_is_refused_before_any_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    run = driver_run({"providers": {"aws": {"driver": "bedrock"}}})
    with pytest.raises(ConfigError, match=r"providers\.aws\.region"):
        run.run(PROMPT, model=MODEL)


def test_the_fake_event_stream_is_what_botocore_decodes() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(aws_event_message("messageStop", {"stopReason": "end_turn"}))
    [message] = list(buffer)
    assert message.headers[":event-type"] == "messageStop"
    assert json.loads(message.payload) == {"stopReason": "end_turn"}
