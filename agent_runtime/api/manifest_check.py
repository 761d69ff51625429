"""`POST /manifests/validate`: what is wrong with a manifest, and the variables it declares,
without starting a run.

The body is what `POST /runs` takes as `manifest` (an object, or YAML/JSON
text), read by the same code (`submission.agent_from_request`, the reader
`agent-runtime validate` uses), under the host's input limits. So a manifest
this route calls valid is one `POST /runs` accepts, and a problem reads as
the CLI and `POST /runs` word it: `manifest: steps[1].outputVariable: ...`.

A manifest's problems are the answer, not an error: 200 with `valid: false`
and each problem (`severity` `error`: `POST /runs` refuses it; `warning`:
what `validate` warns about, such as a template name the manifest never
declares). The reader stops at the first error, as the CLI's does. The web
console's start form builds its variables form from `variables`, so the
browser never parses YAML itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import Field

from agent_runtime.api.problems import problem_schema_responses
from agent_runtime.api.route_context import RouteContext, json_response
from agent_runtime.api.wire import WireModel
from agent_runtime.errors import InvalidInput
from agent_runtime.limits import use_limits

if TYPE_CHECKING:
    from agent_runtime.manifest import AgentManifest

JSON = "application/json"


class ValidateManifestRequest(WireModel):
    """`POST /manifests/validate`: the manifest, as `POST /runs` takes it."""

    manifest: dict[str, Any] | str = Field(
        description="An agent manifest (schema 1.0) as an object, or its YAML/JSON text, as "
                    "`POST /runs` takes it")


class ManifestProblem(WireModel):
    severity: Literal["error", "warning"] = Field(
        description="`error`: POST /runs refuses the manifest; `warning`: it runs, but "
                    "`agent-runtime validate` warns (`--strict` refuses)")
    field: str | None = Field(description="Where, as `steps[1].prompt`; null for the "
                                          "document as a whole")
    message: str = Field(description="What is wrong, in the words of `agent-runtime "
                                     "validate` and POST /runs")


class DeclaredVariable(WireModel):
    key: str
    type: str = Field(description="string, number, boolean, object, array or json")
    required: bool = Field(description="The manifest requires a value for it "
                                       "(`requiresOverride`)")
    has_default: bool = Field(description="The manifest gives it a value (`default`)")
    default: Any = Field(default=None, description="Its value in the manifest, when it has one")
    description: str | None = None


class ManifestCheck(WireModel):
    """What `POST /manifests/validate` found."""

    valid: bool = Field(description="POST /runs would accept this manifest")
    problems: list[ManifestProblem]
    variables: list[DeclaredVariable] = Field(
        description="The variables the manifest declares, in order (empty when it is invalid)")


def check_manifest(manifest: dict[str, Any] | str) -> ManifestCheck:
    """The manifest's problems and declared variables (call it under the host's limits)."""
    # The manifest's reader and models load with the first manifest checked or run
    # created: the routes that only read runs (most requests) never need them.
    from agent_runtime.api.submission import SOURCE, agent_from_request  # noqa: PLC0415
    from agent_runtime.template_references import undeclared_references  # noqa: PLC0415

    try:
        agent = agent_from_request(manifest)
    except InvalidInput as error:
        return ManifestCheck(valid=False, variables=[], problems=[ManifestProblem(
            severity="error", field=error.field, message=error.render())])
    warnings = [ManifestProblem(severity="warning", field=finding.field,
                                message=f"{SOURCE}: {finding.field}: {finding.message}")
                for finding in undeclared_references(agent)]
    return ManifestCheck(valid=True, problems=warnings, variables=declared_variables(agent))


def declared_variables(agent: AgentManifest) -> list[DeclaredVariable]:
    return [DeclaredVariable(key=item.key, type=item.type, required=item.requires_override,
                             has_default=item.has_default,
                             default=item.value if item.has_default else None,
                             description=item.description)
            for item in agent.variables]


def register_manifest_routes(routes: RouteContext) -> None:
    """Add `POST /manifests/validate` to `routes` (it reads no store and needs a caller)."""
    common = (400, 401, 403, 404, 413, 415, 422, 500, 503)

    @routes._route("POST", "/manifests/validate", operation_id="validateManifest",
                   summary="Check a manifest without starting a run",
                   description="Reads the manifest as POST /runs does (the same reader and "
                               "words as `agent-runtime validate`) and answers 200 with its "
                               "problems and declared variables; an invalid manifest is "
                               "`valid: false`, not an error status.",
                   responses={200: {"description": "What the check found",
                                    "content": {JSON: {"model": ManifestCheck}}},
                              **problem_schema_responses(*common)})
    def validate_manifest(body: Annotated[ValidateManifestRequest, Body()]) -> Response[str]:
        routes.tenant()  # a caller is named (the guard authenticated it)
        with use_limits(routes.services.engine().config.limits):  # the host's input limits
            found = check_manifest(body.manifest)
        return json_response(200, found)
