"""What template.yaml grants each function: its role's statements, read from the template.

A statement under `Fn::If` counts as granted (the grant when its condition
holds: a runtime config, Bedrock models, provider secrets). Managed policies
the role attaches are followed when the template defines them; the only other
one a role may attach is AWS's X-Ray daemon policy, when tracing is on. A
policy of the template attached to the role from the policy's side
(`AWS::IAM::Policy` naming it in `Roles`, where the role itself cannot name
what it is granted on without a cycle) counts as the role's too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.stores.aws.aws_template import load_template

FUNCTION = "AWS::Serverless::Function"
XRAY = {"Fn::If": ["TracingOn", {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/"
                                             "AWSXRayDaemonWriteAccess"},
                   {"Ref": "AWS::NoValue"}]}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@dataclass(frozen=True)
class Grant:
    """One Allow statement: its actions, resources and condition."""

    actions: tuple[str, ...]
    resources: tuple[Any, ...]
    condition: dict[str, Any]


def role_of(function: str, template: dict[str, Any] | None = None) -> str:
    template = template or load_template()
    role: str = template["Resources"][function]["Properties"]["Role"]["Fn::GetAtt"][0]
    return role


def grants(role: str, template: dict[str, Any] | None = None) -> list[Grant]:
    """Every Allow statement the role holds, inline or through the stack's managed
    policies; an attached policy the template does not define fails, X-Ray's aside."""
    template = template or load_template()
    resources = template["Resources"]
    properties = resources[role]["Properties"]
    documents = [policy["PolicyDocument"] for policy in properties.get("Policies", [])]
    for arn in properties.get("ManagedPolicyArns", []):
        if arn == XRAY:
            continue
        name = arn.get("Ref") if isinstance(arn, dict) else None
        assert name in resources, f"{role} attaches {arn!r}, which the template does not define"
        documents.append(resources[name]["Properties"]["PolicyDocument"])
    documents += [resource["Properties"]["PolicyDocument"] for resource in resources.values()
                  if resource["Type"] == "AWS::IAM::Policy"
                  and {"Ref": role} in resource["Properties"]["Roles"]]
    found = []
    for document in documents:
        for entry in document["Statement"]:
            statement = entry["Fn::If"][1] if "Fn::If" in entry else entry
            assert statement["Effect"] == "Allow", (role, statement)
            found.append(Grant(tuple(as_list(statement["Action"])),
                               tuple(as_list(statement["Resource"])),
                               statement.get("Condition", {})))
    return found


def actions(role: str, template: dict[str, Any] | None = None) -> set[str]:
    return {action for grant in grants(role, template) for action in grant.actions}


def functions(template: dict[str, Any] | None = None) -> list[str]:
    template = template or load_template()
    return sorted(name for name, resource in template["Resources"].items()
                  if resource["Type"] == FUNCTION)
