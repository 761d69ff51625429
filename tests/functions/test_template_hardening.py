"""template.yaml's hardening (docs/design.md section 10), read from the template itself.

checkov (`make template-check`) finds no failed check; these are the rules it
does not know: deletion protection, encrypted logs, the state machine's
timeouts, and a reason beside every checkov skip (who may use the data key:
test_template_keys.py).
"""

from __future__ import annotations

import json

from aws_stack import DEFINITION

from tests.stores.aws.aws_template import load_template


def test_every_log_group_is_encrypted_with_the_data_key() -> None:
    groups = {name: resource for name, resource in load_template()["Resources"].items()
              if resource["Type"] == "AWS::Logs::LogGroup"}
    assert len(groups) >= 6
    for name, group in groups.items():
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": ["DataKey", "Arn"]}, name


def test_the_table_has_deletion_protection_by_default() -> None:
    template = load_template()
    table = template["Resources"]["RunsTable"]["Properties"]
    assert table["DeletionProtectionEnabled"] == {"Ref": "TableDeletionProtection"}
    assert template["Parameters"]["TableDeletionProtection"]["Default"] == "true"


def test_the_state_machine_and_its_tasks_time_out() -> None:
    definition = json.loads(DEFINITION.read_text())
    assert definition["TimeoutSeconds"] > 0
    functions = load_template()["Resources"]
    timeouts = {"Advance": functions["AdvanceFunction"]["Properties"]["Timeout"]}
    for state, function_timeout in timeouts.items():
        # Past the function's own timeout: the task never cuts a healthy call short.
        assert definition["States"][state]["TimeoutSeconds"] > function_timeout, state


def test_every_checkov_skip_gives_its_reason_beside_the_resource() -> None:
    skips = [(name, skip) for name, resource in load_template()["Resources"].items()
             for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])]
    assert skips
    for name, skip in skips:
        assert skip["id"].startswith("CKV_"), name
        assert len(skip["comment"]) > 20, (name, skip["id"])


def test_retention_consumes_only_ttl_removals_and_no_lifecycle_rule_expires_blobs() -> None:
    template = load_template()
    function = template["Resources"]["RetentionFunction"]["Properties"]
    assert function["Handler"] == "functions.retention.app.handler"
    stream = function["Events"]["TtlRemovals"]["Properties"]
    assert stream["Stream"] == {"Fn::GetAtt": ["RunsTable", "StreamArn"]}
    assert stream["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    (pattern,) = [json.loads(entry["Pattern"]) for entry in stream["FilterCriteria"]["Filters"]]
    assert pattern == {"eventName": ["REMOVE"],
                       "userIdentity": {"type": ["Service"],
                                        "principalId": ["dynamodb.amazonaws.com"]},
                       "dynamodb": {"Keys": {"sk": {"S": ["META"]}}}}
    rules = template["Resources"]["BlobBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert all("ExpirationInDays" not in rule and "ExpirationDate" not in rule for rule in rules)
    statements = template["Resources"]["RetentionRole"]["Properties"]["Policies"][0][
        "PolicyDocument"]["Statement"]
    actions = {action for statement in statements for action in (
        statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])}
    # It deletes; it never writes a run or an object.
    assert not {"dynamodb:PutItem", "dynamodb:UpdateItem", "s3:PutObject"} & actions


def test_provider_secrets_are_readable_only_as_named_and_only_where_models_are_built() -> None:
    resources = load_template()["Resources"]
    readers = []
    for name, resource in resources.items():
        for policy in resource.get("Properties", {}).get("Policies", []):
            for entry in policy["PolicyDocument"]["Statement"]:
                statement = entry["Fn::If"][1] if "Fn::If" in entry else entry
                if "secretsmanager:GetSecretValue" in statement["Action"]:
                    assert entry["Fn::If"][0] == "UsesProviderSecrets", name
                    assert statement["Resource"] == {"Ref": "ProviderSecretArns"}, name
                    readers.append(name)
    assert sorted(readers) == ["AdvanceRole", "ApiRole"]
    for name in ("AdvanceFunction", "ApiFunction"):
        variables = resources[name]["Properties"].get("Environment", {}).get("Variables", {})
        assert not any("KEY" in variable for variable in variables), name
