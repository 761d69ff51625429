"""The code runner as template.yaml deploys it (issue 38, acceptance 3): a role that grants
the code nothing, no secrets in its environment, its own concurrency and timeout,
no network egress, and Advance alone may invoke it (its alias).

"Grants the code nothing": the role's only statements are the network
interface actions Lambda itself needs to attach the function to its subnets,
each refused to any request that carries `lambda:SourceFunctionArn`, which
Lambda adds to every request made with the credentials inside the execution
environment (the code's) and not to its own ENI calls.
"""

from __future__ import annotations

from typing import Any

import pytest
from grants import as_list, grants, role_of

from tests.stores.aws.aws_template import load_template

RUNNERS = ["CodeRunnerPythonFunction", "CodeRunnerJavaScriptFunction"]
LAMBDA_ONLY = {"Null": {"lambda:SourceFunctionArn": "true"}}


def _resources(kind: str) -> dict[str, dict[str, Any]]:
    return {name: resource for name, resource in load_template()["Resources"].items()
            if resource["Type"] == kind}


def _props(name: str) -> dict[str, Any]:
    props: dict[str, Any] = load_template()["Resources"][name]["Properties"]
    return props


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_code_runner_s_role_grants_the_code_nothing(runner: str) -> None:
    role = role_of(runner)
    code_grants = [grant for grant in grants(role) if grant.condition != LAMBDA_ONLY]
    assert code_grants == []
    # Nothing attached from elsewhere either: no managed policy (not even X-Ray's or
    # CloudWatch Logs'), no policy resource naming the role.
    role_props = _props(role)
    assert "ManagedPolicyArns" not in role_props
    assert not [name for name, policy in _resources("AWS::IAM::Policy").items()
                if {"Ref": role} in policy["Properties"]["Roles"]]
    # What Lambda may do with it: the network interfaces, on the stack's subnets
    # and security group.
    actions = {action for grant in grants(role) for action in grant.actions}
    assert actions == {"ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface",
                       "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
                       "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"}
    (create,) = [grant for grant in grants(role) if "ec2:CreateNetworkInterface" in grant.actions]
    named = " ".join(resource["Fn::Sub"] for resource in create.resources)
    for resource in ("CodeRunnerSubnetA", "CodeRunnerSubnetB", "CodeRunnerSecurityGroup"):
        assert "${" + resource + "}" in named, resource
    # The role is the runner's alone.
    users = [name for name, function in _resources("AWS::Serverless::Function").items()
             if function["Properties"]["Role"] == {"Fn::GetAtt": [role, "Arn"]}]
    assert users == [runner]


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_code_runner_has_no_secrets_its_own_concurrency_timeout_and_no_tracing(
        runner: str) -> None:
    props = _props(runner)
    # Only the stack's names from Globals (no variable of its own, no config
    # parameter, no provider secret); the code gets none of them anyway.
    assert "Environment" not in props
    globals_ = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    assert not [name for name in globals_ if "SECRET" in name or "KEY" in name.split("_")]
    assert props["ReservedConcurrentExecutions"] == {"Ref": "CodeRunnerConcurrency"}
    assert props["Timeout"] == {"Ref": "CodeRunnerTimeoutSeconds"}
    assert props["Tracing"] == "Disabled"
    parameters = load_template()["Parameters"]
    assert parameters["CodeRunnerTimeoutSeconds"]["MaxValue"] <= 900


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_code_runner_has_no_network_egress(runner: str) -> None:
    vpc = _props(runner)["VpcConfig"]
    subnets = [subnet["Ref"] for subnet in vpc["SubnetIds"]]
    (group,) = [group["Ref"] for group in vpc["SecurityGroupIds"]]
    # The security group lets nothing in and nothing out: its one egress rule
    # (EC2 adds allow-all to a group without any) reaches only the loopback.
    security_group = _props(group)
    assert "SecurityGroupIngress" not in security_group
    assert security_group["SecurityGroupEgress"] == [{
        "Description": security_group["SecurityGroupEgress"][0]["Description"],
        "IpProtocol": "-1", "CidrIp": "127.0.0.1/32"}]
    assert not _resources("AWS::EC2::SecurityGroupEgress")
    assert not _resources("AWS::EC2::SecurityGroupIngress")
    # Isolated subnets of a VPC of its own: no internet gateway, NAT, route,
    # route table, endpoint or peering anywhere in the stack; no public IPs; and
    # no DNS resolver (Amazon's answers whatever the security group says).
    for kind in ("AWS::EC2::InternetGateway", "AWS::EC2::VPCGatewayAttachment",
                 "AWS::EC2::NatGateway", "AWS::EC2::Route", "AWS::EC2::RouteTable",
                 "AWS::EC2::SubnetRouteTableAssociation", "AWS::EC2::VPCEndpoint",
                 "AWS::EC2::VPCPeeringConnection", "AWS::EC2::TransitGatewayAttachment",
                 "AWS::EC2::EgressOnlyInternetGateway"):
        assert not _resources(kind), kind
    vpc_ids = {_props(subnet)["VpcId"]["Ref"] for subnet in subnets}
    assert vpc_ids == {security_group["VpcId"]["Ref"]}
    (vpc_id,) = vpc_ids
    assert _props(vpc_id)["EnableDnsSupport"] is False
    for subnet in subnets:
        assert _props(subnet)["MapPublicIpOnLaunch"] is False
    # Two zones, so one zone's outage does not stop code steps.
    zones = {str(_props(subnet)["AvailabilityZone"]) for subnet in subnets}
    assert len(zones) == 2


def test_advance_alone_invokes_the_code_runners_by_alias_and_names_them() -> None:
    aliases = sorted(f"{runner}.Alias" for runner in RUNNERS)
    invokes = [(role, grant) for role in ("AdvanceRole", "ApiRole", "StartRole",
                                          "ReconcilerRole", "RetentionRole", "CodeRunnerRole",
                                          "CodeRunnerJavaScriptRole")
               for grant in grants(role) if "lambda:InvokeFunction" in grant.actions]
    assert [role for role, _ in invokes] == ["AdvanceRole"]
    ((_, grant),) = invokes
    assert grant.actions == ("lambda:InvokeFunction",)
    assert sorted(resource["Ref"] for resource in grant.resources) == aliases
    # Advance invokes what its environment names; the API checks new runs' code
    # steps against the same runners (and their timeout).
    for function in ("AdvanceFunction", "ApiFunction"):
        variables = _props(function)["Environment"]["Variables"]
        assert variables["AGENT_RUNTIME_CODE_RUNNER_PYTHON"] == {
            "Ref": "CodeRunnerPythonFunction.Alias"}, function
        assert variables["AGENT_RUNTIME_CODE_RUNNER_JAVASCRIPT"] == {
            "Ref": "CodeRunnerJavaScriptFunction.Alias"}, function
        assert variables["AGENT_RUNTIME_CODE_RUNNER_TIMEOUT_SECONDS"] == {
            "Ref": "CodeRunnerTimeoutSeconds"}, function
    for runner in RUNNERS:
        assert as_list(_props(runner)["Handler"]) == ["functions.code_runner.app.handler"]
