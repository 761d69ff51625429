"""Every field of the manifest, run-manifest and runtime-config models, and the test that
shows its effect (or that it is refused by name). docs/design.md section 3: a field that
is accepted has its effect; nothing is parsed and ignored.

`test_the_table_names_every_field` fails when a model gains a field the table lacks. Kinds:

- `effect`: the named test shows what the field does.
- `refused`: the named test shows `validate` (or the config reader) refusing it by name.
- `descriptive`: kept as written in the manifest, its hash and the run record (names,
  descriptions, metadata, extensions), as in the reference; `test_descriptive_fields_are_
  kept_and_hashed` sets each one and sees the hash change.
- `history`: a field of a `messages[]` history, passed to the model request as written;
  `test_history_fields_reach_the_model_request` shows every one arriving.

There is no kind for a field without a test: a field the code applies gets one.
"""

from __future__ import annotations

import ast
import copy
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from reference_harness import Host, agent

from agent_runtime import RunStatus, ToolContext, tool
from agent_runtime.config import McpConnectionConfig, RuntimeConfig
from agent_runtime.manifest import AgentManifest, manifest_hash, parse_agent_manifest
from agent_runtime.run_manifest import RunManifest, load_manifest_file
from agent_runtime.step_kinds import StepBase, step_kinds, step_model
from agent_runtime.testing import scripted

ROOT = Path(__file__).resolve().parents[2]

CONTRACT = "tests/reference/test_ref_manifest_contract.py::"
RUNTIME = "tests/reference/test_ref_runtime.py::"
LOOPS = "tests/reference/test_ref_step_loop.py::"
PROMPTS = "tests/reference/test_ref_step_prompt.py::"
STANDARD = "tests/reference/test_ref_step_standard.py::"
CONFIG = "tests/reference/test_ref_runtime_config.py::"
STATE = "tests/reference/test_ref_conditions_state.py::"
ENGINE = "tests/agent_runtime/test_engine.py::"
MANIFEST = "tests/agent_runtime/test_manifest.py::"
MCP = "tests/agent_runtime/test_mcp.py::"
MCP_SETTINGS = "tests/agent_runtime/test_mcp_connection_settings.py::"
WAVES = "tests/agent_runtime/test_waves.py::"
WEBHOOK = "tests/agent_runtime/test_webhook.py::"
SUBRUN = "tests/agent_runtime/test_subrun.py::"
TOOLS = "tests/agent_runtime/test_tools_and_approvals.py::"
LIMITS = "tests/agent_runtime/test_limits.py::"
OPENAI = "tests/agent_runtime/models/test_openai_driver.py::"
REASONING = "tests/agent_runtime/models/test_reasoning.py::"
HERE = "tests/reference/test_ref_field_table.py::"
POLICY = "tests/agent_runtime/test_host_policy.py::"
QUOTA = "tests/api/test_routes_quota.py::"

DESCRIPTIVE = ("descriptive", HERE + "test_descriptive_fields_are_kept_and_hashed")
HISTORY = ("history", HERE + "test_history_fields_reach_the_model_request")
RICH = ("effect", PROMPTS + "test_replays_complete_rich_histories_templates_text_only_and_"
        "resolves_artifact_media")
STEP_TYPE = ("effect", MANIFEST + "test_every_step_kind_and_nested_structures_parse")
SANDBOX = "tests/agent_runtime/sandbox/"
CODE_STEPS = SANDBOX + "test_code_steps.py::"
ESCAPES = SANDBOX + "test_sandbox_escapes.py::"
SANDBOX_SETTINGS = SANDBOX + "test_sandbox_settings.py::"
CODE = ("effect", CODE_STEPS + "test_the_reference_example_runs_to_its_output")

FIELDS: dict[str, tuple[str, str]] = {
    # -- the agent manifest
    "AgentManifest.schema_version": ("refused", CONTRACT + "test_requires_an_exact_supported_"
                                     "schema_version"),
    "AgentManifest.id": DESCRIPTIVE,
    "AgentManifest.name": DESCRIPTIVE,
    "AgentManifest.description": DESCRIPTIVE,
    "AgentManifest.model": ("effect", CONFIG + "test_rejects_missing_profiles_capability_"
                            "mismatches_and_connection_elevation"),
    "AgentManifest.variables": ("effect", RUNTIME + "test_resolves_typed_agent_variables_and_"
                                "run_overrides"),
    "AgentManifest.connections": ("effect", MCP + "test_narrowing_by_tools_and_by_mode"),
    "AgentManifest.steps": ("effect", RUNTIME + "test_executes_steps_in_order_and_checkpoints_"
                            "state_before_starting_the_next_step"),
    "AgentManifest.limits": ("effect", RUNTIME + "test_rejects_manifests_and_outputs_that_"
                             "exceed_declared_limits"),
    "AgentManifest.metadata": DESCRIPTIVE,
    "AgentManifest.extensions": DESCRIPTIVE,
    "ProviderModelRef.provider": ("effect", OPENAI + "test_plain_text_completes_the_run_and_"
                                  "usage_is_checkpointed"),
    "ProviderModelRef.model": ("effect", OPENAI + "test_plain_text_completes_the_run_and_"
                               "usage_is_checkpointed"),
    "ProviderModelRef.options": ("effect", HERE + "test_model_options_reach_the_request"),
    "ProfileModelRef.ref": ("effect", CONFIG + "test_resolves_model_profiles_while_allowing_"
                            "an_agent_to_override_provider_options"),
    "ProfileModelRef.options": ("effect", CONFIG + "test_resolves_model_profiles_while_"
                                "allowing_an_agent_to_override_provider_options"),
    "VariableDeclaration.key": ("effect", ENGINE + "test_prompt_chain_passes_outputs_through_"
                                "templates"),
    "VariableDeclaration.type": ("effect", "tests/agent_runtime/test_variables.py::test_type_"
                                 "checks"),
    "VariableDeclaration.value": ("effect", "tests/agent_runtime/test_variables.py::test_"
                                  "defaults_apply_and_undeclared_values_stay_absent"),
    "VariableDeclaration.requires_override": ("effect", "tests/agent_runtime/test_variables.py"
                                              "::test_missing_required_override_without_a_"
                                              "default"),
    "VariableDeclaration.description": DESCRIPTIVE,
    "VariableDeclaration.metadata": DESCRIPTIVE,
    "Connection.ref": ("effect", MCP + "test_tool_agent_runs_against_a_stdio_server"),
    "Connection.alias": ("effect", MCP + "test_narrowing_by_tools_and_by_mode"),
    "Connection.tools": ("effect", MCP + "test_narrowing_by_tools_and_by_mode"),
    "Connection.mode": ("effect", MCP + "test_a_read_only_connection_cannot_be_raised_to_read_"
                        "write"),
    "Connection.required": ("effect", MCP + "test_an_optional_connection_that_fails_to_open_"
                            "is_left_out"),
    "Limits.max_steps": ("effect", RUNTIME + "test_rejects_manifests_and_outputs_that_exceed_"
                         "declared_limits"),
    "Limits.max_messages_per_prompt": ("effect", PROMPTS + "test_enforces_configured_complete_"
                                       "history_input_limits"),
    "Limits.max_input_bytes": ("effect", HERE + "test_max_input_bytes_fails_a_large_request"),
    "Limits.max_output_bytes": ("effect", RUNTIME + "test_rejects_manifests_and_outputs_that_"
                                "exceed_declared_limits"),
    "Limits.max_tool_calls_per_iteration": ("effect", HERE + "test_max_tool_calls_per_"
                                            "iteration_fails_a_larger_response"),
    "Limits.provider_timeout_ms": ("effect", "tests/functions/test_deadlines.py::test_the_"
                                   "engine_bounds_a_model_call_by_provider_timeout_ms"),
    # -- steps (fields of StepBase are every kind's)
    "StepBase.type": STEP_TYPE,
    "StepBase.id": ("effect", RUNTIME + "test_executes_registered_child_steps_with_nested_"
                    "event_paths"),
    "StepBase.name": DESCRIPTIVE,
    "StepBase.description": DESCRIPTIVE,
    "StepBase.when": ("effect", STATE + "test_returns_true_for_a_blank_condition"),
    "StepBase.output_variable": ("effect", LOOPS + "test_filters_collection_items_while_"
                                 "retaining_source_indices"),
    "StepBase.include_in_final_output": ("effect", RUNTIME + "test_selects_steps_marked_for_"
                                         "final_output_in_manifest_order"),
    "StepBase.metadata": ("effect", STANDARD + "test_passes_approval_details_to_the_adapter_"
                          "but_keeps_secrets_out_of_events"),
    "StepBase.extensions": DESCRIPTIVE,
    "PromptStep.type": STEP_TYPE,
    "PromptStep.prompt": ("effect", ENGINE + "test_prompt_chain_passes_outputs_through_"
                          "templates"),
    "PromptStep.system_prompt": ("effect", ENGINE + "test_system_prompt_and_messages_are_"
                                 "rendered"),
    "PromptStep.messages": RICH,
    "PromptStep.model": ("effect", CONFIG + "test_model_capabilities_refuse_what_the_model_"
                         "cannot_do"),
    "PromptStep.output_schema": ("effect", ENGINE + "test_output_schema_is_validated"),
    "PromptStep.tools": ("effect", PROMPTS + "test_executes_tool_calls_sequentially_before_"
                         "continuing"),
    "PromptStep.max_output_tokens": ("effect", HERE + "test_max_output_tokens_reaches_the_"
                                     "request"),
    "PromptStep.completion_policy": ("effect", PROMPTS + "test_fails_truncated_output_by_"
                                     "default_and_allows_an_explicit_partial_output_policy"),
    "CompletionPolicy.on_truncation": ("effect", PROMPTS + "test_fails_truncated_output_by_"
                                       "default_and_allows_an_explicit_partial_output_policy"),
    "CompletionPolicy.require_output": ("effect", PROMPTS + "test_can_require_non_empty_final_"
                                        "output"),
    "PromptMessage.role": RICH,
    "PromptMessage.content": RICH,
    "PromptMessage.metadata": RICH,
    "PromptMessage.provider_options": RICH,
    "_Part.metadata": HISTORY,
    "_Part.provider_options": HISTORY,
    "TextPart.type": RICH,
    "TextPart.text": RICH,
    "ReasoningPart.type": HISTORY,
    "ReasoningPart.text": HISTORY,
    "ReasoningPart.encrypted": HISTORY,
    "JsonPart.type": HISTORY,
    "JsonPart.value": HISTORY,
    "_MediaPart.artifact": RICH,
    "_MediaPart.url": HISTORY,
    "_MediaPart.data": HISTORY,
    "_MediaPart.media_type": RICH,
    "ImagePart.type": RICH,
    "FilePart.type": HISTORY,
    "FilePart.name": HISTORY,
    "MessageArtifact.id": RICH,
    "MessageArtifact.name": HISTORY,
    "MessageArtifact.media_type": RICH,
    "MessageArtifact.uri": RICH,
    "MessageArtifact.size": HISTORY,
    "MessageArtifact.sha256": HISTORY,
    "MessageArtifact.metadata": HISTORY,
    "ToolCallPart.type": RICH,
    "ToolCallPart.call": RICH,
    "ToolCall.id": RICH,
    "ToolCall.name": RICH,
    "ToolCall.input": RICH,
    "ToolCall.step_id": HISTORY,
    "ToolCall.provider_executed": HISTORY,
    "ToolCall.metadata": HISTORY,
    "ToolResultPart.type": RICH,
    "ToolResultPart.result": RICH,
    "ToolResult.call_id": RICH,
    "ToolResult.name": RICH,
    "ToolResult.output": RICH,
    "ToolResult.error": HISTORY,
    "ToolResult.artifacts": RICH,
    "ToolResult.metadata": RICH,
    "ToolResultError.code": HISTORY,
    "ToolResultError.message": HISTORY,
    "ToolResultError.retryable": HISTORY,
    "ToolResultError.details": HISTORY,
    "ToolResultError.stack": HISTORY,
    "LoopStep.type": STEP_TYPE,
    "LoopStep.loop": ("effect", LOOPS + "test_carries_previous_iteration_state_and_stops_when_"
                      "a_goal_is_met"),
    "LoopStep.steps": ("effect", LOOPS + "test_resumes_at_the_next_child_without_replaying_"
                       "the_committed_child"),
    "LoopSpec.source": ("effect", ENGINE + "test_loop_sources"),
    "LoopSpec.delimiter": ("effect", ENGINE + "test_loop_delimiter_final_mode_and_max_"
                           "iterations"),
    "LoopSpec.item_variable": ("effect", STATE + "test_applies_dotted_set_paths_consistently"),
    "LoopSpec.index_variable": ("effect", LOOPS + "test_filters_collection_items_while_"
                                "retaining_source_indices"),
    "LoopSpec.condition": ("effect", LOOPS + "test_filters_collection_items_while_retaining_"
                           "source_indices"),
    "LoopSpec.goal": ("effect", LOOPS + "test_carries_previous_iteration_state_and_stops_when_"
                      "a_goal_is_met"),
    "LoopSpec.output_mode": ("effect", ENGINE + "test_loop_delimiter_final_mode_and_max_"
                             "iterations"),
    "LoopSpec.result_variable": ("effect", LOOPS + "test_replaces_a_result_variable_with_each_"
                                 "final_child_output_when_no_child_writes_it"),
    "LoopSpec.max_iterations": ("effect", ENGINE + "test_index_loop_without_source_runs_max_"
                                "iterations"),
    "ApprovalStep.type": STEP_TYPE,
    "ApprovalStep.prompt": ("effect", STANDARD + "test_passes_approval_details_to_the_adapter_"
                            "but_keeps_secrets_out_of_events"),
    "ApprovalStep.action": ("effect", TOOLS + "test_rejection_honours_the_action"),
    "SubRunStep.type": STEP_TYPE,
    "SubRunStep.manifest": ("effect", SUBRUN + "test_inline_child_output_flows_to_the_parent_"
                            "under_a_deterministic_id"),
    "SubRunStep.manifest_ref": ("effect", SUBRUN + "test_manifest_ref_is_resolved_next_to_the_"
                                "parent_manifest"),
    "SubRunStep.variable_mappings": ("effect", SUBRUN + "test_variable_mappings_pass_parent_"
                                     "values_to_the_child"),
    "WebhookStep.type": STEP_TYPE,
    "WebhookStep.url": ("effect", WEBHOOK + "test_the_request_is_sent_as_declared_with_the_"
                        "idempotency_key"),
    "WebhookStep.method": ("effect", WEBHOOK + "test_the_request_is_sent_as_declared_with_the_"
                           "idempotency_key"),
    "WebhookStep.headers": ("effect", WEBHOOK + "test_the_request_is_sent_as_declared_with_the"
                            "_idempotency_key"),
    "WebhookStep.body": ("effect", WEBHOOK + "test_the_request_is_sent_as_declared_with_the_"
                         "idempotency_key"),
    "WebhookStep.timeout_ms": ("effect", WEBHOOK + "test_an_unreachable_destination_is_"
                               "retried_then_fails"),
    "WebhookStep.retries": ("effect", STANDARD + "test_does_not_retry_non_retryable_http_"
                            "failures_or_expose_their_body"),
    "WebhookStep.idempotency_key": ("effect", STANDARD + "test_retries_sequentially_with_one_"
                                    "stable_idempotency_key_and_redacted_lifecycle_data"),
    "CodeStep.type": CODE,
    "CodeStep.language": CODE,
    "CodeStep.code": CODE,
    "CodeStep.timeout_ms": ("effect", CODE_STEPS + "test_a_step_past_its_timeout_fails_the_step"),
    "CodeStep.environment": ("effect", CODE_STEPS + "test_the_steps_environment_reaches_the_"
                             "code_and_no_event"),
    # -- the run manifest
    "RunManifest.schema_version": ("refused", CONTRACT + "test_requires_an_agent_reference_"
                                   "and_rejects_agent_definition_fields"),
    "RunManifest.agent": ("effect", MANIFEST + "test_run_manifest_loads_and_resolves_its_agent_"
                          "relative_to_itself"),
    "RunAgentRef.ref": ("effect", MANIFEST + "test_run_manifest_with_missing_agent_names_the_"
                        "ref"),
    "RunManifest.run_id": ("effect", HERE + "test_a_run_manifest_file_sets_id_variables_and_"
                           "budget"),
    "RunManifest.variables": ("effect", HERE + "test_a_run_manifest_file_sets_id_variables_"
                              "and_budget"),
    "VariableOverride.key": ("effect", RUNTIME + "test_rejects_unknown_duplicate_and_"
                             "incorrectly_typed_run_overrides"),
    "VariableOverride.value": ("effect", RUNTIME + "test_rejects_unknown_duplicate_and_"
                               "incorrectly_typed_run_overrides"),
    "RunManifest.execution": ("effect", WAVES + "test_the_execution_setting_is_kept_with_the_"
                              "run_and_checked"),
    "RunExecution.mode": ("effect", WAVES + "test_a_wave_issues_every_members_request_before_"
                          "any_answer_arrives"),
    "RunExecution.max_concurrency": ("effect", WAVES + "test_max_concurrency_and_the_host_cap_"
                                     "split_the_wave"),
    "RunManifest.budget": ("effect", HERE + "test_a_run_manifest_file_sets_id_variables_and_"
                           "budget"),
    "RunBudget.max_total_tokens": ("effect", CONTRACT + "test_requires_a_positive_safe_"
                                   "integer_token_budget"),
    # -- the runtime config
    "RuntimeConfig.version": ("refused", LIMITS + "test_a_bad_limits_section_is_refused_by_"
                              "name"),
    "RuntimeConfig.providers": ("effect", OPENAI + "test_a_compatible_server_never_receives_"
                                "the_openai_key"),
    "ProviderConfig.driver": ("effect", OPENAI + "test_a_compatible_server_never_receives_the_"
                              "openai_key"),
    "ProviderConfig.base_url": ("effect", CONFIG + "test_rejects_provider_endpoint_credentials_"
                                "embedded_in_urls"),
    "ProviderConfig.api_key": ("effect", CONFIG + "test_parses_common_local_and_remote_"
                               "provider_definitions_without_inline_secrets"),
    "ProviderConfig.headers": ("effect", "tests/agent_runtime/models/test_provider_settings.py"
                               "::test_headers_reach_the_provider_with_the_request"),
    "ProviderConfig.include_usage": ("effect", OPENAI + "test_streamed_deltas_reach_the_text_"
                                     "channel_in_order_and_events_carry_no_text"),
    "ProviderConfig.supports_structured_outputs": ("effect", OPENAI + "test_output_schema_uses_"
                                                   "json_schema_response_format_when_"
                                                   "supported"),
    "ProviderConfig.region": ("effect", "tests/agent_runtime/models/test_bedrock_driver.py::"
                              "test_a_missing_region_is_refused_before_any_request"),
    "EnvReference.env": ("effect", MCP + "test_an_unset_environment_reference_fails_the_"
                         "connection"),
    "RuntimeConfig.models": ("effect", CONFIG + "test_resolves_model_profiles_while_allowing_"
                             "an_agent_to_override_provider_options"),
    "ModelProfile.provider": ("effect", CONFIG + "test_resolves_model_profiles_while_allowing_"
                              "an_agent_to_override_provider_options"),
    "ModelProfile.model": ("effect", CONFIG + "test_resolves_model_profiles_while_allowing_an_"
                           "agent_to_override_provider_options"),
    "ModelProfile.options": ("effect", CONFIG + "test_resolves_model_profiles_while_allowing_"
                             "an_agent_to_override_provider_options"),
    "ModelProfile.capabilities": ("effect", CONFIG + "test_model_capabilities_refuse_what_the_"
                                  "model_cannot_do"),
    "ModelCapabilities.streaming": ("effect", OPENAI + "test_a_model_profile_with_streaming_"
                                    "streams_without_a_watcher"),
    "ModelCapabilities.tools": ("effect", CONFIG + "test_rejects_missing_profiles_capability_"
                                "mismatches_and_connection_elevation"),
    "ModelCapabilities.structured_output": ("effect", CONFIG + "test_model_capabilities_"
                                            "refuse_what_the_model_cannot_do"),
    "ModelCapabilities.reasoning": ("effect", REASONING + "test_a_profile_without_reasoning_"
                                    "drops_it"),
    "ModelCapabilities.max_input_tokens": ("effect", REASONING + "test_max_input_tokens_"
                                           "refuses_a_request_certainly_too_large_before_"
                                           "sending_it"),
    "ModelCapabilities.image_input": ("effect", CONFIG + "test_model_capabilities_refuse_what"
                                      "_the_model_cannot_do"),
    "ModelCapabilities.max_output_tokens": ("effect", CONFIG + "test_model_capabilities_"
                                            "refuse_what_the_model_cannot_do"),
    "RuntimeConfig.connections": ("effect", MCP + "test_tool_agent_runs_against_a_stdio_"
                                  "server"),
    "McpConnectionConfig.driver": ("refused", MCP + "test_connection_config_is_strict"),
    "McpConnectionConfig.transport": ("effect", MCP + "test_tool_agent_runs_against_a_"
                                      "streamable_http_server"),
    "McpConnectionConfig.url": ("effect", MCP + "test_tool_agent_runs_against_a_streamable_"
                                "http_server"),
    "McpConnectionConfig.auth": ("effect", MCP + "test_tool_agent_runs_against_a_streamable_"
                                 "http_server"),
    "McpAuth.type": ("effect", CONFIG + "test_accepts_explicit_mcp_auth_modes_and_rejects_"
                     "ambiguous_authorization"),
    "McpAuth.token": ("effect", MCP + "test_tool_agent_runs_against_a_streamable_http_server"),
    "McpConnectionConfig.bearer_token": ("effect", MCP + "test_headers_and_a_bearer_token_go_"
                                         "with_every_http_request"),
    "McpConnectionConfig.headers": ("effect", MCP + "test_headers_and_a_bearer_token_go_with_"
                                    "every_http_request"),
    "McpConnectionConfig.command": ("effect", MCP + "test_tool_agent_runs_against_a_stdio_"
                                    "server"),
    "McpConnectionConfig.args": ("effect", MCP + "test_tool_agent_runs_against_a_stdio_"
                                 "server"),
    "McpConnectionConfig.env": ("effect", MCP + "test_an_unset_environment_reference_fails_"
                                "the_connection"),
    "McpConnectionConfig.cwd": ("effect", MCP_SETTINGS + "test_cwd_is_the_working_directory_"
                                "of_the_server_process"),
    "McpConnectionConfig.mode": ("effect", MCP + "test_a_read_only_connection_cannot_be_"
                                 "raised_to_read_write"),
    "McpConnectionConfig.tools": ("effect", MCP + "test_narrowing_by_tools_and_by_mode"),
    "McpConnectionConfig.read_tools": ("effect", MCP + "test_narrowing_by_tools_and_by_mode"),
    "McpConnectionConfig.non_idempotent_tools": ("effect", MCP + "test_a_non_idempotent_tool_"
                                                 "whose_result_was_lost_suspends"),
    "McpConnectionConfig.required": ("effect", MCP + "test_a_required_connection_that_fails_"
                                     "to_open_fails_the_step"),
    "McpConnectionConfig.connect_timeout_ms": ("effect", MCP_SETTINGS + "test_connect_timeout_"
                                               "ms_cuts_a_server_that_does_not_start"),
    "McpConnectionConfig.tool_timeout_ms": ("effect", MCP_SETTINGS + "test_tool_timeout_ms_"
                                            "cuts_a_call_that_does_not_answer"),
    "RuntimeConfig.tools": ("effect", "tests/e2e/test_tool_agent.py::test_a_tool_the_host_does"
                            "_not_allow_is_refused_naming_it"),
    "RuntimeConfig.webhooks": ("effect", WEBHOOK + "test_the_policy_parses_from_the_config"),
    "WebhookPolicy.allow_private_networks": ("effect", WEBHOOK + "test_a_webhook_to_127_0_0_1_"
                                             "is_refused_unless_the_config_allows_it"),
    "WebhookPolicy.allowed_hosts": ("effect", WEBHOOK + "test_the_allowlist_applies_to_local_"
                                    "destinations_too"),
    "WebhookPolicy.max_response_bytes": ("effect", WEBHOOK + "test_a_response_over_the_cap_"
                                         "fails_the_step_naming_the_cap"),
    "RuntimeConfig.limits": ("effect", LIMITS + "test_the_runtime_config_overrides_limits"),
    "RuntimeConfig.store": ("effect", "tests/e2e/test_cli_error_table.py::test_the_store_of_"
                            "the_config_in_the_current_directory"),
    "SecretReference.secret": ("effect", "tests/functions/test_provider_secrets.py::test_the_"
                               "step_handler_calls_the_provider_with_the_key_from_secrets_"
                               "manager"),
    "SecretReference.field": ("effect", "tests/functions/test_provider_secrets.py::test_an_ssm_"
                              "secure_string_and_a_json_field_are_read_too"),
    "RuntimeConfig.sandbox": ("refused", ENGINE + "test_code_step_needs_a_sandbox"),
    "SandboxSettings.adapter": CODE,
    "SandboxSettings.bwrap": ("effect", ESCAPES + "test_without_bubblewrap_the_adapter_refuses_"
                              "and_runs_nothing"),
    "SandboxSettings.idempotent": ("effect", "tests/e2e/test_code_step_crash.py::test_a_crash_"
                                   "mid_code_step_runs_it_again_when_the_sandbox_is_idempotent"),
    "SandboxSettings.network": ("refused", SANDBOX_SETTINGS + "test_network_other_than_none_is_"
                                "refused_by_name"),
    "SandboxSettings.timeout_ms": ("effect", SANDBOX_SETTINGS + "test_a_step_without_timeout_"
                                   "gets_the_hosts_default"),
    "SandboxSettings.max_timeout_ms": ("refused", CODE_STEPS + "test_validate_refuses_code_"
                                       "steps_the_config_cannot_run_by_step"),
    "SandboxSettings.memory_mb": ("effect", ESCAPES + "test_memory_past_the_limit_is_refused"),
    "SandboxSettings.cpu_seconds": ("effect", ESCAPES + "test_cpu_time_past_the_limit_ends_the_"
                                    "code"),
    "SandboxSettings.max_processes": ("effect", ESCAPES + "test_a_fork_bomb_is_bounded_and_the_"
                                      "host_survives"),
    "SandboxSettings.max_file_bytes": ("effect", SANDBOX_SETTINGS + "test_files_are_bounded_in_"
                                       "size_and_in_total"),
    "SandboxSettings.workspace_bytes": ("effect", SANDBOX_SETTINGS + "test_files_are_bounded_"
                                        "in_size_and_in_total"),
    "SandboxSettings.max_output_bytes": ("effect", ESCAPES + "test_printing_past_the_output_"
                                         "limit_kills_the_code"),
    "SandboxSettings.allowed_environment": ("refused", CODE_STEPS + "test_validate_refuses_"
                                            "code_steps_the_config_cannot_run_by_step"),
    "SandboxSettings.run_as": ("effect", SANDBOX_SETTINGS + "test_the_code_runs_as_the_run_as_"
                               "uid_under_root"),
    "SandboxSettings.languages": ("effect", SANDBOX_SETTINGS + "test_language_profiles_and_"
                                  "their_binds"),
    "LanguageProfile.command": ("effect", SANDBOX_SETTINGS + "test_language_profiles_and_their_"
                                "binds"),
    "LanguageProfile.extension": ("effect", SANDBOX_SETTINGS + "test_language_profiles_and_"
                                  "their_binds"),
    "LanguageProfile.binds": ("effect", SANDBOX_SETTINGS + "test_language_profiles_and_their_"
                              "binds"),
    "LanguageProfile.address_space_mb": ("effect", ESCAPES + "test_memory_past_the_limit_in_"
                                         "javascript_is_refused"),
    "RuntimeConfig.execution": ("effect", WAVES + "test_max_concurrency_and_the_host_cap_split_"
                                "the_wave"),
    "ExecutionPolicy.max_concurrency": ("effect", WAVES + "test_max_concurrency_and_the_host_"
                                        "cap_split_the_wave"),
    "RuntimeConfig.policy": ("effect", POLICY + "test_the_cli_is_permissive_without_a_policy_"
                             "and_serve_is_not"),
    "HostPolicy.providers": ("effect", POLICY + "test_model_providers_models_and_profiles_are_"
                             "the_hosts_to_allow"),
    "HostPolicy.models": ("effect", POLICY + "test_model_providers_models_and_profiles_are_"
                          "the_hosts_to_allow"),
    "HostPolicy.profiles": ("effect", POLICY + "test_model_providers_models_and_profiles_are_"
                            "the_hosts_to_allow"),
    "HostPolicy.require_profiles": ("effect", POLICY + "test_model_providers_models_and_"
                                    "profiles_are_the_hosts_to_allow"),
    "HostPolicy.scripted": ("effect", POLICY + "test_a_listed_script_file_runs_and_no_other_"
                            "does"),
    "HostPolicy.script_files": ("effect", POLICY + "test_a_listed_script_file_runs_and_no_"
                                "other_does"),
    "HostPolicy.max_loop_iterations": ("effect", POLICY + "test_loop_iterations_and_steps_are_"
                                       "capped_before_a_run_exists"),
    "HostPolicy.max_steps": ("effect", POLICY + "test_loop_iterations_and_steps_are_capped_"
                             "before_a_run_exists"),
    "HostPolicy.max_total_tokens": ("effect", POLICY + "test_a_token_budget_is_capped_and_a_"
                                    "run_without_one_gets_the_cap"),
    "HostPolicy.max_step_output_bytes": ("effect", POLICY + "test_step_and_run_outputs_are_"
                                         "capped"),
    "HostPolicy.max_run_output_bytes": ("effect", POLICY + "test_step_and_run_outputs_are_"
                                        "capped"),
    "HostPolicy.max_concurrent_runs": ("effect", QUOTA + "test_unfinished_runs_past_the_quota_"
                                       "answer_429"),
    "HostPolicy.runs_per_minute": ("effect", QUOTA + "test_runs_per_minute_past_the_quota_"
                                   "answer_429_until_the_minute_passes"),
    "HostPolicy.connections": ("effect", POLICY + "test_connections_are_allowed_by_list_and_by_"
                               "the_hosts_hook"),
    "HostPolicy.authorize_connection": ("effect", POLICY + "test_connections_are_allowed_by_"
                                        "list_and_by_the_hosts_hook"),
    "HostPolicy.tools": ("effect", POLICY + "test_tools_are_allowed_by_list_and_by_the_hosts_"
                         "hook"),
    "HostPolicy.authorize_tool": ("effect", POLICY + "test_tools_are_allowed_by_list_and_by_"
                                  "the_hosts_hook"),
    "InputLimits.manifest_bytes": ("effect", LIMITS + "test_the_runtime_config_overrides_"
                                   "limits"),
    "InputLimits.variables_bytes": ("effect", LIMITS + "test_limits_in_effect_bound_every_"
                                    "reader"),
    "InputLimits.max_depth": ("effect", LIMITS + "test_the_runtime_config_overrides_limits"),
    "InputLimits.max_values": ("effect", LIMITS + "test_limits_in_effect_bound_every_reader"),
    "InputLimits.max_string_length": ("effect", LIMITS + "test_strings_integers_and_surrogates_"
                                      "in_values_and_keys"),
    "InputLimits.max_integer_digits": ("effect", LIMITS + "test_strings_integers_and_"
                                       "surrogates_in_values_and_keys"),
    "InputLimits.condition_length": ("effect", LIMITS + "test_an_expression_past_the_length_"
                                     "limit_does_not_compile"),
    "InputLimits.condition_cost": ("effect", LIMITS + "test_a_too_costly_condition_fails_its_"
                                   "step_with_a_clear_error"),
}


def _declaring_class(model: type[BaseModel], name: str) -> str:
    for cls in model.__mro__:
        if name in getattr(cls, "__annotations__", {}):
            return cls.__name__
    return model.__name__


def model_fields(roots: tuple[type[BaseModel], ...] = (AgentManifest, RunManifest,
                                                      RuntimeConfig)) -> set[str]:
    """`Class.field` for every field reachable from `roots` (by default the three
    documents), named by the class that declares it."""
    found: set[str] = set()
    seen: set[type] = set()

    def walk(annotation: Any) -> None:
        if typing.get_origin(annotation) is not None:
            for argument in typing.get_args(annotation):
                walk(argument)
            return
        if annotation is StepBase:  # a step is validated by its kind's model
            for kind in step_kinds():
                walk(step_model(kind))
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) \
                and annotation not in seen:
            seen.add(annotation)
            for name, info in annotation.model_fields.items():
                found.add(f"{_declaring_class(annotation, name)}.{name}")
                walk(info.annotation)

    for root in roots:
        walk(root)
    return found


def test_the_table_names_every_field() -> None:
    fields = model_fields()
    assert sorted(fields - FIELDS.keys()) == [], "fields the table lacks"
    assert sorted(FIELDS.keys() - fields) == [], "table rows for fields that are gone"


def test_a_field_added_deep_in_a_model_is_one_the_table_lacks() -> None:
    # The walk reaches models inside containers and unions, and names an inherited
    # field by the class that declares it, so a new field anywhere is reported.
    class Connection(McpConnectionConfig):
        keep_alive_ms: int = 0

    class Config(BaseModel):
        connections: dict[str, Connection | None]

    found = model_fields((Config,))
    assert sorted(found - FIELDS.keys()) == ["Config.connections", "Connection.keep_alive_ms"]
    assert "McpConnectionConfig.cwd" in found and "McpAuth.token" in found


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_named_test_exists() -> None:
    for field, (kind, where) in FIELDS.items():
        assert kind in ("effect", "refused", "descriptive", "history"), field
        path, _, name = where.partition("::")
        assert name in _tests_in(ROOT / path), f"{field}: {where}"


def _with(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(data)
    target: Any = changed
    *parents, last = path.split(".")
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[last] = value
    return changed


BASE: dict[str, Any] = {"schemaVersion": "1.0",
                        "variables": [{"key": "topic", "type": "string", "value": "x"}],
                        "steps": [{"id": "a", "type": "prompt", "prompt": "A."}]}


@pytest.mark.parametrize(("field", "path", "value"), [
    ("AgentManifest.id", "id", "release-brief"),
    ("AgentManifest.name", "name", "Release brief"),
    ("AgentManifest.description", "description", "Writes the brief."),
    ("AgentManifest.metadata", "metadata", {"owner": "docs"}),
    ("AgentManifest.extensions", "extensions", {"x-ui": {"icon": "pen"}}),
    ("VariableDeclaration.description", "variables.0.description", "What it is about."),
    ("VariableDeclaration.metadata", "variables.0.metadata", {"ui": "text"}),
    ("StepBase.name", "steps.0.name", "Draft"),
    ("StepBase.description", "steps.0.description", "Drafts it."),
    ("StepBase.extensions", "steps.0.extensions", {"x-ui": {"color": "blue"}}),
])
def test_descriptive_fields_are_kept_and_hashed(field: str, path: str, value: Any) -> None:
    assert FIELDS[field][0] == "descriptive"
    base = parse_agent_manifest(BASE, source="test")
    changed = parse_agent_manifest(_with(BASE, path, value), source="test")
    assert manifest_hash(changed) != manifest_hash(base)
    host = Host()
    result = host.run(changed)
    record = host.store.load_run(result.run_id)
    assert record is not None and record.manifest == parse_agent_manifest(
        _with(BASE, path, value), source="test").model_dump(mode="json", by_alias=True,
                                                            exclude_unset=True)


def test_history_fields_reach_the_model_request() -> None:
    part_extras = {"metadata": {"m": 1}, "providerOptions": {"p": {"q": 2}}}
    history = [
        {"role": "user", "content": [
            {"type": "text", "text": "Look.", **part_extras},
            {"type": "json", "value": {"a": 1}},
            {"type": "image", "url": "https://example.test/a.png", "mediaType": "image/png"},
            {"type": "file", "data": "AQID", "mediaType": "text/plain", "name": "a.txt"},
            {"type": "file", "artifact": {"id": "f", "name": "f.txt", "mediaType": "text/plain",
                                          "uri": "https://example.test/f.txt", "size": 3,
                                          "sha256": "ab", "metadata": {"k": 1}}}]},
        {"role": "assistant", "content": [
            {"type": "reasoning", "text": "thinking", "encrypted": "opaque"},
            {"type": "tool-call", "call": {"id": "c1", "name": "lookup", "input": {},
                                           "stepId": "earlier", "providerExecuted": True,
                                           "metadata": {"n": 1}}}]},
        {"role": "tool", "content": [{"type": "tool-result", "result": {
            "callId": "c1", "name": "lookup",
            "error": {"code": "E", "message": "failed", "retryable": True,
                      "details": {"d": 1}, "stack": "trace"}}}]},
        {"role": "user", "content": [{"type": "text", "text": "Continue."}]}]
    model = scripted(responses=[{"text": "done"}])
    host = Host(model=model)
    result = host.run(agent({"id": "h", "type": "prompt", "messages": history}))
    assert result.status is RunStatus.COMPLETED
    request, = model.requests
    assert [{"role": m["role"], "content": m["content"]} for m in request.messages] == history


def test_model_options_reach_the_request() -> None:
    model = scripted(responses=[{"text": "done"}])
    host = Host(model=model)
    host.run(agent({"id": "a", "type": "prompt", "prompt": "A."},
                   model={"provider": "scripted", "model": "test",
                          "options": {"temperature": 0.1}}), options={})
    assert model.requests[0].options == {"temperature": 0.1}


def test_max_output_tokens_reaches_the_request() -> None:
    model = scripted(responses=[{"text": "done"}])
    Host(model=model).run(agent({"id": "a", "type": "prompt", "prompt": "A.",
                                 "maxOutputTokens": 77}))
    assert model.requests[0].max_output_tokens == 77


def test_max_input_bytes_fails_a_large_request() -> None:
    model = scripted(responses=[{"text": "done"}])
    result = Host(model=model).run(agent({"id": "a", "type": "prompt", "prompt": "x" * 200},
                                         limits={"maxInputBytes": 100}))
    assert (result.status, result.error["type"]) == (RunStatus.FAILED, "input_too_large")
    assert model.requests == []


def test_max_tool_calls_per_iteration_fails_a_larger_response() -> None:
    @tool
    def ping(ctx: ToolContext) -> str:
        """Ping."""
        return "pong"

    calls = [{"name": "ping", "arguments": {}}] * 3
    host = Host(model=scripted(responses=[{"toolCalls": calls}]), tools=[ping])
    result = host.run(agent({"id": "a", "type": "prompt", "prompt": "A.", "tools": ["ping"]},
                            limits={"maxToolCallsPerIteration": 2}))
    assert (result.status, result.error["type"]) == (RunStatus.FAILED, "too_many_tool_calls")


def test_a_run_manifest_file_sets_id_variables_and_budget(tmp_path: Path) -> None:
    """Also core/src/agent-runtime.test.ts: "starts a run from a validated agent run manifest
    that references an agent"."""
    (tmp_path / "brief.agent.json").write_text(json.dumps({
        "schemaVersion": "1.0",
        "variables": [{"key": "audience", "type": "string", "value": "everyone"}],
        "steps": [{"id": "a", "type": "prompt", "prompt": "For {{ audience }}."}]}))
    (tmp_path / "brief.run.json").write_text(json.dumps({
        "schemaVersion": "1.0", "agent": {"ref": "brief.agent.json"}, "runId": "brief-42",
        "variables": [{"key": "audience", "value": "partners"}],
        "budget": {"maxTotalTokens": 1000}}))
    model = scripted(responses=[{"text": "done"}])
    host = Host(model=model)
    result = host.run(load_manifest_file(tmp_path / "brief.run.json"))
    assert result.run_id == "brief-42"
    assert model.requests[0].messages[-1]["content"][0]["text"] == "For partners."
    record = host.store.load_run("brief-42")
    assert record is not None and record.budget.max_total_tokens == 1000
