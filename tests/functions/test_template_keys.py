"""The data key's policy and the bucket that pins it (docs/design.md section 10), read from
template.yaml, and the run store's own writes checked against the bucket policy.

Administration and use are separate: no principal that administers the key may
use it, create a grant for itself or (unless it is KeyAdministratorArn) change
the policy; data is decrypted only through DynamoDB and S3. The bucket refuses
an object put under any other key. (moto applies no bucket policy: see
tests/stores/aws/aws_template.py, so the statements are evaluated here.)
"""

from __future__ import annotations

import fnmatch
from typing import Any

from aws_stack import Deployment
from grants import as_list

from tests.stores.aws.aws_template import load_template, properties

ACCOUNT_ROOT = {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}
# What would let a principal read the data, directly or by giving itself the right.
DATA_USE = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey",
            "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncryptFrom", "kms:ReEncryptTo"]
SELF_GRANTING = ["kms:CreateGrant", "kms:PutKeyPolicy"]
# Request parameters of PutObject -> the S3 condition keys they set.
PUT_OBJECT_CONDITION_KEYS = {
    "s3:x-amz-server-side-encryption": "ServerSideEncryption",
    "s3:x-amz-server-side-encryption-aws-kms-key-id": "SSEKMSKeyId"}


def _key_statements() -> dict[str, dict[str, Any]]:
    policy = properties(load_template(), "DataKey")["KeyPolicy"]
    return {statement["Sid"]: statement for statement in policy["Statement"]}


def _allows(statement: dict[str, Any], action: str) -> bool:
    return any(fnmatch.fnmatchcase(action, pattern) for pattern in as_list(statement["Action"]))


def test_whoever_administers_the_key_cannot_use_it_or_grant_itself_use() -> None:
    admin = _key_statements()["AccountAdministers"]
    assert admin["Principal"] == {"AWS": ACCOUNT_ROOT} and "Condition" not in admin
    for action in DATA_USE + SELF_GRANTING:
        assert not _allows(admin, action), action
    assert not {"kms:*", "kms:Create*", "kms:Put*"} & set(admin["Action"])


def test_grants_are_for_dynamodb_and_the_policy_changes_only_by_its_administrator() -> None:
    statements = _key_statements()
    granting = {sid for sid, statement in statements.items()
                if _allows(statement, "kms:CreateGrant")}
    assert granting == {"DataServicesCreateGrants"}
    grant = statements["DataServicesCreateGrants"]
    assert as_list(grant["Action"]) == ["kms:CreateGrant"]
    assert grant["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    assert grant["Condition"]["StringEquals"]["kms:ViaService"] == {
        "Fn::Sub": "dynamodb.${AWS::Region}.amazonaws.com"}

    changing = {sid for sid, statement in statements.items()
                if _allows(statement, "kms:PutKeyPolicy")}
    assert changing == {"KeyPolicyChanges"}
    change = statements["KeyPolicyChanges"]
    assert as_list(change["Action"]) == ["kms:PutKeyPolicy"]
    assert change["Principal"] == {"AWS": {"Fn::If": [
        "HasKeyAdministrator", {"Ref": "KeyAdministratorArn"}, ACCOUNT_ROOT]}}
    template = load_template()
    assert template["Parameters"]["KeyAdministratorArn"]["Default"] == ""
    assert template["Conditions"]["HasKeyAdministrator"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "KeyAdministratorArn"}, ""]}]}


def test_data_is_decrypted_only_through_dynamodb_and_s3_or_by_logs_for_its_groups() -> None:
    for sid, statement in _key_statements().items():
        if not any(_allows(statement, action) for action in DATA_USE):
            continue
        if sid == "LogsEncryptLogGroups":
            assert statement["Principal"] == {"Service": {
                "Fn::Sub": "logs.${AWS::Region}.amazonaws.com"}}
            assert "kms:EncryptionContext:aws:logs:arn" in statement["Condition"]["ArnLike"]
            continue
        assert sid == "UseThroughDataServices"
        via = statement["Condition"]["StringEquals"]["kms:ViaService"]
        assert [entry["Fn::Sub"].split(".", 1)[0] for entry in via] == ["dynamodb", "s3"]


def _denied(statements: list[dict[str, Any]], params: dict[str, Any]) -> list[str]:
    """The Deny statements on s3:PutObject that refuse a PutObject with `params`
    (StringNotEqualsIfExists: a header sent with another value refuses)."""
    refusing = []
    for statement in statements:
        if statement["Effect"] != "Deny" or "s3:PutObject" not in as_list(statement["Action"]):
            continue
        conditions = statement["Condition"]
        if set(conditions) != {"StringNotEqualsIfExists"}:
            continue  # TlsOnly: the clients only speak HTTPS
        matched = [params.get(PUT_OBJECT_CONDITION_KEYS[key]) not in (None, *as_list(value))
                   for key, value in conditions["StringNotEqualsIfExists"].items()]
        if all(matched):
            refusing.append(statement["Sid"])
    return refusing


def test_the_bucket_refuses_objects_under_another_key_but_not_the_stores_writes(
        deployment: Deployment) -> None:
    stack = deployment.stack
    template = load_template()
    policy = stack.names.resolve(properties(template, "BlobBucketPolicy"), template)
    statements = policy["PolicyDocument"]["Statement"]
    (pinned,) = [statement for statement in statements if statement["Sid"] == "DataKeyOnly"]
    assert pinned["Condition"] == {"StringNotEqualsIfExists": {
        "s3:x-amz-server-side-encryption-aws-kms-key-id": stack.resources.key_arn}}

    # The store the functions open from the template's StoreLocation writes a blob.
    blobs = deployment.services.store.blobs
    assert blobs is not None
    sent: list[dict[str, Any]] = []
    blobs.client.meta.events.register(
        "before-parameter-build.s3.PutObject",
        lambda params, **_: sent.append(dict(params)))
    blobs.put(b'{"large": "checkpoint"}', run_id="run_keys")
    (request,) = sent
    assert request["SSEKMSKeyId"] == stack.resources.key_arn
    assert _denied(statements, request) == []
    assert _denied(statements, {}) == []  # no header: the bucket's default, this key

    # Anyone naming another key, or another kind of encryption, is refused.
    other_key = stack.resources.key_arn.rsplit("/", 1)[0] + "/another-key"
    assert _denied(statements, {**request, "SSEKMSKeyId": other_key}) == ["DataKeyOnly"]
    assert _denied(statements, {"ServerSideEncryption": "AES256"}) == ["KmsOnly"]
