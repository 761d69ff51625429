"""Parallel waves (docs/design.md section 13): a parallel run's independent top-level prompts
run side by side, checkpoint as they go, resume only what did not finish, and
share one token budget.

Overlap is asserted from the order of events (every request started before
any finished), never from wall time; `bench/parallel_waves.py` has the timing.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from engine_harness import Harness, manifest

from agent_runtime import Budget, RunStatus
from agent_runtime.config import parse_config
from agent_runtime.errors import ConfigError, InvalidInput
from agent_runtime.events import Event
from agent_runtime.testing import scripted

PARALLEL = {"mode": "parallel", "maxConcurrency": 4}
IDS = ("north", "south", "east", "west")


def member(step_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": f"Report on the {step_id}.",
            "outputVariable": step_id, **extra}


def fan_out(*, consumer: bool = False, **extra: Any) -> Any:
    steps = [member(step_id, includeInFinalOutput=True, **extra) for step_id in IDS]
    if consumer:
        steps.append({"id": "summary", "type": "prompt", "includeInFinalOutput": True,
                      "prompt": "Sum up {{ north }} {{ south }} {{ east }} {{ west }}."})
    return manifest(*steps)


def answers(delay_ms: int = 0, usage: dict[str, int] | None = None,
            rounds: int = 1) -> dict[str, list[dict[str, Any]]]:
    """One answer per member; with `rounds` 2 each first asks for a tool it does not
    have (a commit point of its own) before answering."""
    script: dict[str, list[dict[str, Any]]] = {}
    for step_id in IDS:
        entries: list[dict[str, Any]] = []
        if rounds == 2:
            entries.append({"toolCalls": [{"name": "missing", "arguments": {}}],
                            "delayMs": delay_ms})
        entries.append({"text": f"{step_id} report", "delayMs": delay_ms})
        if usage is not None:
            for entry in entries:
                entry["usage"] = usage
        script[step_id] = entries
    script["summary"] = [{"text": "all four"}]
    return script


def options(execution: dict[str, Any] | None = PARALLEL) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "scripted/test"}
    if execution is not None:
        base["execution"] = execution
    return base


def order(events: list[Event], *types: str) -> list[tuple[str, str | None]]:
    return [(event.type, event.step_path) for event in events if event.type in types]


def in_flight_peak(events: list[Event]) -> int:
    """The most model requests started and not yet completed at any point."""
    peak = current = 0
    for event in events:
        if event.type == "model.started":
            current += 1
            peak = max(peak, current)
        elif event.type == "model.completed":
            current -= 1
    return peak


def test_a_wave_issues_every_members_request_before_any_answer_arrives() -> None:
    h = Harness(scripted(by_step=answers(delay_ms=20)))
    result = h.run(fan_out(), options=options())
    assert result.status is RunStatus.COMPLETED
    seen = order(h.events.events, "model.started", "model.completed")
    assert [kind for kind, _ in seen[:4]] == ["model.started"] * 4
    assert {path for _, path in seen[:4]} == set(IDS)
    assert in_flight_peak(h.events.events) == 4
    # the outputs are in manifest order whatever order the members finished in
    assert result.output == [f"{step_id} report" for step_id in IDS]


def test_without_parallel_execution_the_same_steps_run_one_at_a_time() -> None:
    for execution in (None, {"mode": "sequential"}):
        h = Harness(scripted(by_step=answers(delay_ms=1)))
        result = h.run(fan_out(), options=options(execution))
        assert result.status is RunStatus.COMPLETED
        assert in_flight_peak(h.events.events) == 1
        assert "wave.started" not in h.types()


def test_max_concurrency_and_the_host_cap_split_the_wave() -> None:
    h = Harness(scripted(by_step=answers(delay_ms=5)))
    h.run(fan_out(), options=options({"mode": "parallel", "maxConcurrency": 2}))
    assert in_flight_peak(h.events.events) == 2
    assert [event.data["steps"] for event in h.events.events if event.type == "wave.started"] \
        == [["north", "south"], ["east", "west"]]
    capped = Harness(scripted(by_step=answers(delay_ms=5)),
                     config=parse_config({"version": "1.0", "execution": {"maxConcurrency": 3}},
                                         source="config.yaml"))
    capped.run(fan_out(), options=options({"mode": "parallel", "maxConcurrency": 8}))
    assert in_flight_peak(capped.events.events) == 3


def test_the_host_cap_is_a_positive_count() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"version": "1.0", "execution": {"maxConcurrency": 0}}, source="c.yaml")
    assert refused.value.field == "execution.maxConcurrency"


def test_a_consumer_runs_after_the_wave_with_every_output() -> None:
    model = scripted(by_step=answers(delay_ms=2))
    h = Harness(model)
    result = h.run(fan_out(consumer=True), options=options())
    assert result.status is RunStatus.COMPLETED
    summary = next(r for r in model.requests if r.step_id == "summary")
    text = summary.messages[-1]["content"][0]["text"]
    assert text == "Sum up north report south report east report west report."
    # each member's conversation is its own, though they share the transcript
    for request in model.requests:
        assert len(request.messages) == 1, request.step_id


def test_events_carry_each_members_path_in_order_and_the_wave_bounds_them() -> None:
    h = Harness(scripted(by_step=answers(delay_ms=2)))
    h.run(fan_out(), options=options())
    for step_id in IDS:
        mine = [event.type for event in h.events.events if event.step_path == step_id
                and event.type.startswith(("step.", "model.started", "model.completed"))]
        assert mine == ["step.started", "model.started", "model.completed", "step.completed"]
        # a member's tokens are its own, though its siblings spent at the same time
        completed = next(event for event in h.events.events
                         if event.type == "step.completed" and event.step_path == step_id)
        usage = next(event for event in h.events.events
                     if event.type == "model.usage" and event.step_path == step_id)
        assert completed.data["tokens"] == usage.data["tokens"] > 0
    types = h.types("wave.")
    assert types == ["wave.started", "wave.completed"]
    wave_start = next(e for e in h.events.events if e.type == "wave.started")
    wave_end = next(e for e in h.events.events if e.type == "wave.completed")
    steps = [e for e in h.events.events if e.type.startswith("step.")]
    assert all(wave_start.sequence < e.sequence < wave_end.sequence for e in steps)


def test_the_cursor_records_the_wave_and_its_finished_members() -> None:
    h = Harness(scripted(by_step={"north": [{"text": "n", "delayMs": 1}],
                                  "south": [{"text": "s", "delayMs": 60}],
                                  "east": [{"text": "e", "delayMs": 60}],
                                  "west": [{"text": "w", "delayMs": 60}]}))
    result = h.run(fan_out(), options=options())
    first = h.store.load_checkpoint(result.run_id, 1)
    assert first is not None
    wave = first.cursor[0].continuation["wave"]
    assert wave["steps"] == [0, 1, 2, 3] and wave["finished"] == [0]
    assert set(wave["members"]) == {"1", "2", "3"}  # each with its own progress
    assert all("from" in progress for progress in wave["members"].values())
    assert [entry["step_id"] for entry in first.step_results] == ["north"]


def test_a_wave_spans_advance_slices_and_no_answered_request_is_asked_again() -> None:
    """Every member has two commit points; a slice ends at its first commit point
    past the deadline, the others stop at theirs, and the next slice goes on."""
    uninterrupted = Harness(scripted(by_step=answers(delay_ms=2, rounds=2)))
    reference = uninterrupted.run(fan_out(), options=options())
    assert reference.status is RunStatus.COMPLETED

    model = scripted(by_step=answers(delay_ms=2, rounds=2))
    h = Harness(model)
    record = h.runtime.create_run(manifest=fan_out(), options=options())
    reserved = h.store.resume_run(record.run_id, owner="slices", now=h.clock.now(),
                                  lease_seconds=30)
    slices = 0
    while True:
        slices += 1
        result = asyncio.run(h.runtime.advance(record.run_id, deadline=h.clock.now(),
                                               expected_attempt=reserved.attempt))
        if result.status is not RunStatus.RUNNING:
            break
        h.clock.advance(1)
    assert result.status is RunStatus.COMPLETED and slices > 2
    assert result.output == reference.output
    per_step = [request.step_id for request in model.requests]
    assert sorted(per_step) == sorted(r.step_id for r in uninterrupted.model.requests)
    assert all(per_step.count(step_id) == 2 for step_id in IDS)
    # each member's conversation is the uninterrupted one: resumed, not restarted
    assert conversations(h, result.run_id) == conversations(uninterrupted, reference.run_id)


def conversations(h: Harness, run_id: str) -> dict[str, list[tuple[str, str]]]:
    saved = h.store.load_latest_checkpoint(run_id)
    assert saved is not None
    talk: dict[str, list[tuple[str, str]]] = {}
    for item in saved.transcript:
        # call ids and idempotency keys differ from run to run; names and texts do not
        said = [part.get("text") or (part.get("call") or part.get("result") or {}).get("name")
                for part in item["content"]]
        talk.setdefault(item["step_path"], []).append((item["type"], str(said)))
    return talk


def test_a_failing_member_fails_the_run_after_the_others_finish_their_request() -> None:
    script = answers(delay_ms=20)
    # The failure arrives while the others' requests are in flight, as a provider's
    # error does: one that failed before a member even started would stop it first.
    script["south"] = [{"error": {"code": "overloaded", "message": "try later"}, "delayMs": 5}]
    h = Harness(scripted(by_step=script))
    result = h.run(fan_out(), options=options())
    assert result.status is RunStatus.FAILED and result.error["type"] == "model_error"
    started = [event.step_path for event in h.events.events if event.type == "model.started"]
    assert sorted(started) == sorted(IDS)
    saved = h.store.load_latest_checkpoint(result.run_id)
    assert saved is not None
    assert sorted(entry["step_id"] for entry in saved.step_results) == ["east", "north", "west"]


# -- the budget ------------------------------------------------------------------

HUNDRED = {"inputTokens": 60, "outputTokens": 40, "totalTokens": 100}


def test_members_in_flight_overshoot_a_budget_they_could_not_foresee_and_it_is_reported(
        ) -> None:
    """No request has been answered yet and none says how long its answer may be:
    all four start against a budget for two; what they take beyond it is the
    overshoot, and the run suspends before the next request."""
    model = scripted(by_step=answers(delay_ms=5, usage=HUNDRED))
    h = Harness(model)
    result = h.run(fan_out(consumer=True), options=options(), budget=Budget(max_total_tokens=200))
    assert result.status is RunStatus.SUSPENDED
    assert result.suspension is not None and result.suspension["reason"] == "token-budget"
    assert result.usage["consumed_tokens"] == 400
    overshoot = result.usage["overshoot_tokens"]
    assert overshoot == 200
    assert overshoot <= 4 * HUNDRED["totalTokens"]  # at most the members in flight
    reported = [event.data for event in h.events.events if event.type == "budget.overshoot"]
    assert reported and reported[-1]["overshoot_tokens"] == 200
    assert "summary" not in [request.step_id for request in model.requests]


def test_reservations_let_only_the_requests_the_budget_allows_start() -> None:
    """With the answer's length bounded (maxOutputTokens), each request reserves
    its estimate: two start, the other two wait, then find the budget spent and
    suspend the run; a resume with room runs only those two."""
    agent = fan_out(maxOutputTokens=90)
    model = scripted(by_step=answers(delay_ms=5, usage=HUNDRED))
    h = Harness(model)
    result = h.run(agent, options=options(), budget=Budget(max_total_tokens=200))
    assert result.status is RunStatus.SUSPENDED
    assert result.suspension is not None and result.suspension["reason"] == "token-budget"
    assert result.usage["model_requests"] == 2 and result.usage["overshoot_tokens"] == 0
    assert in_flight_peak(h.events.events) == 2
    first = [request.step_id for request in model.requests]

    resumed = h.resume(result.run_id, budget=Budget(max_total_tokens=1000))
    assert resumed.status is RunStatus.COMPLETED
    assert resumed.output == [f"{step_id} report" for step_id in IDS]
    again = [request.step_id for request in model.requests][len(first):]
    assert sorted(first + again) == sorted(IDS)  # no answered request asked again


# -- the setting ---------------------------------------------------------------------


def test_the_execution_setting_is_kept_with_the_run_and_checked(tmp_path: Any) -> None:
    agent = tmp_path / "agent.yaml"
    agent.write_text("schemaVersion: '1.0'\nid: fan\nsteps:\n"
                     "  - {id: a, type: prompt, prompt: A}\n"
                     "  - {id: b, type: prompt, prompt: B}\n", encoding="utf-8")
    run = tmp_path / "run.yaml"
    run.write_text("schemaVersion: '1.0'\nagent: {ref: agent.yaml}\n"
                   "execution: {mode: parallel, maxConcurrency: 2}\n", encoding="utf-8")
    h = Harness(scripted())
    result = h.runtime.run_sync(manifest=str(run), options={"model": "scripted/echo"})
    assert result.status is RunStatus.COMPLETED
    record = h.store.load_run(result.run_id)
    assert record is not None
    assert record.options["execution"] == {"mode": "parallel", "maxConcurrency": 2}
    assert h.types("wave.") == ["wave.started", "wave.completed"]
    with pytest.raises(InvalidInput) as refused:
        h.run(fan_out(), options=options({"mode": "sideways"}))
    assert refused.value.field == "options.execution"


def test_a_deadline_in_the_past_still_finishes_each_members_request() -> None:
    h = Harness(scripted(by_step=answers(delay_ms=2)))
    record = h.runtime.create_run(manifest=fan_out(), options=options())
    reserved = h.store.resume_run(record.run_id, owner="one", now=h.clock.now(),
                                  lease_seconds=30)
    result = asyncio.run(h.runtime.advance(record.run_id,
                                           deadline=h.clock.now() - timedelta(seconds=1),
                                           expected_attempt=reserved.attempt))
    # each member stops at its next commit point: here, its last
    assert result.status is RunStatus.RUNNING
    saved = h.store.load_latest_checkpoint(record.run_id)
    assert saved is not None and len(saved.step_results) == 4


def test_a_member_whose_condition_is_false_is_skipped_and_the_wave_goes_on() -> None:
    agent = manifest(member("north", when="false"), member("south"), member("east"))
    h = Harness(scripted(by_step=answers(delay_ms=2)))
    result = h.run(agent, options=options())
    assert result.status is RunStatus.COMPLETED
    assert [r.step_id for r in h.model.requests if r.step_id == "north"] == []
    assert order(h.events.events, "step.skipped") == [("step.skipped", "north")]
    assert result.output == "east report"  # the last step in manifest order


def test_a_run_cancelled_mid_wave_stops_every_member_at_its_next_commit_point() -> None:
    h = Harness(scripted(by_step=answers(delay_ms=40, rounds=2)))

    async def cancel_soon() -> None:
        await asyncio.sleep(0.01)
        h.runtime.cancel("mid-wave")

    async def both() -> Any:
        run = h.runtime.run(manifest=fan_out(), options=options(), run_id="mid-wave")
        result, _ = await asyncio.gather(run, cancel_soon())
        return result

    result = asyncio.run(both())
    assert result.status is RunStatus.CANCELLED
    # each member's first request was in flight; none asked a second
    assert sorted(r.step_id for r in h.model.requests) == sorted(IDS)


def test_a_sub_run_of_a_parallel_run_runs_its_own_steps_in_order() -> None:
    """The parent's run manifest said how the parent runs: its child, a run of
    another manifest, does not inherit the setting."""
    child = {"schemaVersion": "1.0", "id": "child",
             "steps": [member("north"), member("south")]}
    agent = manifest({"id": "delegate", "type": "sub-run", "manifest": child,
                      "includeInFinalOutput": True},
                     member("east"), member("west"))
    h = Harness(scripted(by_step=answers(delay_ms=2)))
    result = h.run(agent, options=options())
    assert result.status is RunStatus.COMPLETED
    (child_run,) = h.store.list_runs(parent_run_id=result.run_id).runs
    assert "execution" not in child_run.options
    waves = [event.data["steps"] for event in h.events.events if event.type == "wave.started"]
    assert waves == [["east", "west"]]  # the parent's; the child ran north, then south


def test_a_step_begun_alone_under_a_smaller_host_cap_ends_alone_then_waves_resume() -> None:
    """An attempt on a host capping waves at 1 stops inside the first step; a host
    with room finishes that step alone and runs the rest as a wave."""
    one = parse_config({"version": "1.0", "execution": {"maxConcurrency": 1}}, source="c.yaml")
    h = Harness(scripted(by_step=answers(delay_ms=2, rounds=2)), config=one)
    record = h.runtime.create_run(manifest=fan_out(), options=options())
    reserved = h.store.resume_run(record.run_id, owner="narrow", now=h.clock.now(),
                                  lease_seconds=30)
    first = asyncio.run(h.runtime.advance(record.run_id, deadline=h.clock.now(),
                                          expected_attempt=reserved.attempt))
    assert first.status is RunStatus.RUNNING and "wave.started" not in h.types()
    h.config = None
    wide = h.make_runtime()
    result = asyncio.run(wide.advance(record.run_id, expected_attempt=reserved.attempt))
    assert result.status is RunStatus.COMPLETED
    assert result.output == [f"{step_id} report" for step_id in IDS]
    assert [e.data["steps"] for e in h.events.events if e.type == "wave.started"] == [
        ["south", "east", "west"]]
    asked = [request.step_id for request in h.model.requests]
    assert all(asked.count(step_id) == 2 for step_id in IDS)
