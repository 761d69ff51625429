"""template.yaml: the resources the store relies on, as the store names them."""

from __future__ import annotations

from aws_template import AwsResources, load_template, properties

from stores.dynamodb.items import (
    AGENT_INDEX,
    PARENT_INDEX,
    STATUS_INDEX,
    TENANT_INDEX,
    TTL_ATTRIBUTE,
)


def test_the_template_is_a_sam_template_with_the_storage_resources() -> None:
    template = load_template()
    assert template["AWSTemplateFormatVersion"] == "2010-09-09"
    assert template["Transform"] == "AWS::Serverless-2016-10-31"
    assert {"RunsTable", "BlobBucket", "BlobBucketPolicy", "DataKey",
            "DataKeyAlias"} <= set(template["Resources"])


def test_the_table_has_the_keys_indexes_and_ttl_the_store_uses() -> None:
    table = properties(load_template(), "RunsTable")
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert [(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]] == [
        ("pk", "HASH"), ("sk", "RANGE")]
    # The former index and its `status` attribute are there on a parameter's
    # condition (test_dynamodb_status_shards.py builds the table both ways).
    definitions = [a for a in table["AttributeDefinitions"] if "Fn::If" not in a]
    indexes = {index["IndexName"]: index for index in table["GlobalSecondaryIndexes"]
               if "Fn::If" not in index}
    assert [(k["AttributeName"], k["KeyType"]) for k in indexes[STATUS_INDEX]["KeySchema"]] == [
        ("status_shard", "HASH"), ("due_at", "RANGE")]
    assert [(k["AttributeName"], k["KeyType"]) for k in indexes[PARENT_INDEX]["KeySchema"]] == [
        ("parent_run_id", "HASH"), ("run_id", "RANGE")]
    assert [(k["AttributeName"], k["KeyType"]) for k in indexes[TENANT_INDEX]["KeySchema"]] == [
        ("tenant", "HASH"), ("run_id", "RANGE")]
    assert [(k["AttributeName"], k["KeyType"]) for k in indexes[AGENT_INDEX]["KeySchema"]] == [
        ("agent_key", "HASH"), ("run_id", "RANGE")]
    # The agent index carries the creation time, the Query's filter of a time range.
    assert indexes.pop(AGENT_INDEX)["Projection"] == {
        "ProjectionType": "INCLUDE", "NonKeyAttributes": ["created_at"]}
    assert {index["Projection"]["ProjectionType"] for index in indexes.values()} == {"KEYS_ONLY"}
    types = {a["AttributeName"]: a["AttributeType"] for a in definitions}
    assert types == {"pk": "S", "sk": "S", "status_shard": "S", "due_at": "N",
                     "parent_run_id": "S", "run_id": "S", "tenant": "S", "agent_key": "S"}
    assert table["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["SSESpecification"] == {"SSEEnabled": True, "SSEType": "KMS",
                                         "KMSMasterKeyId": {"Ref": "DataKey"}}


def test_the_key_rotates_and_the_bucket_is_private_kms_encrypted_and_tls_only() -> None:
    template = load_template()
    assert properties(template, "DataKey")["EnableKeyRotation"] is True
    bucket = properties(template, "BlobBucket")
    [rule] = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": ["DataKey", "Arn"]}}
    assert rule["BucketKeyEnabled"] is True
    assert set(bucket["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4
    statements = properties(template, "BlobBucketPolicy")["PolicyDocument"]["Statement"]
    [tls] = [s for s in statements if s.get("Sid") == "TlsOnly"]
    assert (tls["Effect"], tls["Principal"], tls["Action"]) == ("Deny", "*", "s3:*")
    assert tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert tls["Resource"] == [{"Fn::GetAtt": ["BlobBucket", "Arn"]},
                               {"Fn::Sub": "${BlobBucket.Arn}/*"}]


def test_moto_built_the_table_and_bucket_from_those_properties(aws: AwsResources) -> None:
    table = aws.dynamodb.describe_table(TableName=aws.table)["Table"]
    # A new stack's table: the former index only on an upgrade's opt-in.
    assert {index["IndexName"] for index in table["GlobalSecondaryIndexes"]} == {
        STATUS_INDEX, PARENT_INDEX, TENANT_INDEX, AGENT_INDEX}
    assert table["SSEDescription"]["SSEType"] == "KMS"
    ttl = aws.dynamodb.describe_time_to_live(TableName=aws.table)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
    encryption = aws.s3.get_bucket_encryption(Bucket=aws.bucket)
    [rule] = encryption["ServerSideEncryptionConfiguration"]["Rules"]
    assert rule["ApplyServerSideEncryptionByDefault"]["KMSMasterKeyID"] == aws.key_arn
    block = aws.s3.get_public_access_block(Bucket=aws.bucket)["PublicAccessBlockConfiguration"]
    assert set(block.values()) == {True}
    assert aws.kms.get_key_rotation_status(KeyId=aws.key_id)["KeyRotationEnabled"] is True
