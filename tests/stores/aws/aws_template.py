"""template.yaml's resources, built in moto from their own properties.

The table, bucket and key the AWS tests use come from the template's
`RunsTable`, `BlobBucket`, `BlobBucketPolicy`, `DataKey` and `DataKeyAlias`
properties: key schema, attribute definitions, GSIs, billing mode, TTL,
point-in-time recovery, SSE, stream; bucket encryption, public access block,
ownership; key rotation and key policy. (The bucket policy is checked, not
applied: see `create_resources`.) A change to the template changes the
tests' resources, so the tests and the deployment cannot drift apart.

CloudFormation's short-form tags (`!Ref`, `!GetAtt`, `!Sub`, `!If`, ...) load
as their long forms, and `resolve` evaluates the few intrinsics the template
uses against the names moto gave the resources.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import yaml

REPO = Path(__file__).resolve().parents[3]
TEMPLATE = REPO / "template.yaml"
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's account
STACK = "agent-runtime-test"


class CloudFormationLoader(yaml.SafeLoader):
    """A YAML loader that reads CloudFormation's short-form intrinsic tags."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


CloudFormationLoader.add_multi_constructor("!", _intrinsic)


@functools.cache
def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    template: dict[str, Any] = yaml.load(path.read_text(), Loader=CloudFormationLoader)
    return template


def properties(template: dict[str, Any], name: str) -> dict[str, Any]:
    props: dict[str, Any] = template["Resources"][name]["Properties"]
    return props


# What `!Ref AWS::NoValue` resolves to: removed from the list or mapping holding it.
_NO_VALUE = object()


@dataclass
class Names:
    """What moto named each resource: `!Ref` and `!GetAtt` values by logical id."""

    refs: dict[str, str]
    attributes: dict[tuple[str, str], str]
    parameters: dict[str, Any]
    # AWS::StackName: another name stands up a second stack's resources.
    stack: str = STACK

    def resolve(self, value: Any, template: dict[str, Any]) -> Any:
        """`value` with the template's intrinsics evaluated (an `AWS::NoValue` drops the
        list entry or property it stands for)."""
        if isinstance(value, list):
            return [item for item in (self.resolve(item, template) for item in value)
                    if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (name, argument), = value.items()
            if name == "Ref":
                return self._ref(argument)
            if name == "Fn::GetAtt":
                return self.attributes[(argument[0], argument[1])]
            if name == "Fn::Sub":
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(self._sub(m.group(1))), argument)
            if name == "Fn::If":
                condition, then, otherwise = argument
                chosen = then if self._condition(condition, template) else otherwise
                return self.resolve(chosen, template)
        resolved = {key: self.resolve(item, template) for key, item in value.items()}
        return {key: item for key, item in resolved.items() if item is not _NO_VALUE}

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return _NO_VALUE
        pseudo = {"AWS::StackName": self.stack, "AWS::AccountId": ACCOUNT, "AWS::Region": REGION,
                  "AWS::Partition": "aws"}
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        return self.refs[name]

    def _sub(self, name: str) -> Any:
        if "." in name and not name.startswith("AWS::"):
            resource, attribute = name.split(".", 1)
            return self.attributes[(resource, attribute)]
        return self._ref(name)

    def _condition(self, name: str, template: dict[str, Any]) -> bool:
        return bool(self._evaluate(template["Conditions"][name], template))

    def _evaluate(self, expression: Any, template: dict[str, Any]) -> Any:
        if isinstance(expression, dict) and len(expression) == 1:
            (name, argument), = expression.items()
            if name == "Fn::Not":
                return not self._evaluate(argument[0], template)
            if name == "Fn::Equals":
                left, right = (str(self._evaluate(a, template)) for a in argument)
                return left == right
            if name == "Condition":
                return self._condition(argument, template)
        return self.resolve(expression, template)


@dataclass
class AwsResources:
    """The table, bucket and key of a test, with clients to reach them."""

    table: str
    bucket: str
    key_id: str
    key_arn: str
    dynamodb: Any
    s3: Any
    kms: Any


def clients(session: boto3.session.Session, endpoint_url: str | None = None) -> dict[str, Any]:
    return {service: session.client(service, region_name=REGION, endpoint_url=endpoint_url)
            for service in ("dynamodb", "s3", "kms")}


def create_resources(aws_clients: dict[str, Any], *, table: str, bucket: str) -> AwsResources:
    """Create the template's key, bucket and table (named `bucket`, `table`) in moto."""
    template = load_template()
    names = Names(refs={}, attributes={}, parameters={
        name: spec.get("Default") for name, spec in template["Parameters"].items()})
    kms, s3 = aws_clients["kms"], aws_clients["s3"]

    key_props = properties(template, "DataKey")
    key = kms.create_key(
        Description=names.resolve(key_props["Description"], template),
        KeySpec=key_props["KeySpec"], KeyUsage=key_props["KeyUsage"],
        Policy=json.dumps(names.resolve(key_props["KeyPolicy"], template)))["KeyMetadata"]
    if key_props.get("EnableKeyRotation"):
        kms.enable_key_rotation(KeyId=key["KeyId"])
    names.refs["DataKey"] = key["KeyId"]
    names.attributes[("DataKey", "Arn")] = key["Arn"]
    alias = properties(template, "DataKeyAlias")
    kms.create_alias(AliasName=names.resolve(alias["AliasName"], template),
                     TargetKeyId=names.resolve(alias["TargetKeyId"], template))

    names.refs["BlobBucket"] = bucket
    names.attributes[("BlobBucket", "Arn")] = f"arn:aws:s3:::{bucket}"
    _create_bucket(s3, names.resolve(properties(template, "BlobBucket"), template), bucket)
    # BlobBucketPolicy is resolved (so its references are checked) but not
    # applied: moto enforces statements with Principal "*" while ignoring their
    # conditions, so a Deny conditioned on aws:SecureTransport would deny every
    # request. test_aws_template.py checks the policy's statements instead.
    policy = names.resolve(properties(template, "BlobBucketPolicy"), template)
    assert policy["Bucket"] == bucket
    resources = AwsResources(table="", bucket=bucket, key_id=key["KeyId"], key_arn=key["Arn"],
                             **aws_clients)
    return create_table(resources, table)


def create_table(resources: AwsResources, table: str, **parameters: str) -> AwsResources:
    """The template's RunsTable, named `table`, beside `resources`' key and bucket, with
    the template's parameters at their defaults unless given."""
    template = load_template()
    unknown = set(parameters) - set(template["Parameters"])
    assert not unknown, f"template.yaml has no parameter {sorted(unknown)}"
    names = Names(refs={"DataKey": resources.key_id},
                  attributes={("DataKey", "Arn"): resources.key_arn}, parameters={
                      name: spec.get("Default") for name, spec in template["Parameters"].items()
                  } | parameters)
    _create_table(resources.dynamodb, names.resolve(properties(template, "RunsTable"), template),
                  table)
    return dataclasses.replace(resources, table=table)


def _create_table(client: Any, props: dict[str, Any], name: str) -> None:
    sse = props["SSESpecification"]
    client.create_table(
        TableName=name, BillingMode=props["BillingMode"], KeySchema=props["KeySchema"],
        AttributeDefinitions=props["AttributeDefinitions"],
        GlobalSecondaryIndexes=props["GlobalSecondaryIndexes"],
        SSESpecification={"Enabled": sse["SSEEnabled"], "SSEType": sse["SSEType"],
                          "KMSMasterKeyId": sse["KMSMasterKeyId"]},
        StreamSpecification={"StreamEnabled": True,
                             "StreamViewType": props["StreamSpecification"]["StreamViewType"]})
    client.update_time_to_live(TableName=name,
                               TimeToLiveSpecification=props["TimeToLiveSpecification"])
    recovery = props["PointInTimeRecoverySpecification"]
    client.update_continuous_backups(TableName=name, PointInTimeRecoverySpecification={
        "PointInTimeRecoveryEnabled": recovery["PointInTimeRecoveryEnabled"]})


def _create_bucket(client: Any, props: dict[str, Any], name: str) -> None:
    client.create_bucket(Bucket=name)
    # CloudFormation's ServerSideEncryptionByDefault is the API's Apply... one.
    rules = [{"ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"],
              "BucketKeyEnabled": rule["BucketKeyEnabled"]}
             for rule in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]]
    client.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
    client.put_public_access_block(
        Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"])
    client.put_bucket_ownership_controls(Bucket=name,
                                         OwnershipControls=props["OwnershipControls"])
