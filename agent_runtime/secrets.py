"""Provider keys from AWS: `apiKey: {secret: NAME}` in the runtime config.

A key that lives in AWS Secrets Manager or in an SSM SecureString parameter is
named in the config instead of being copied into an environment variable, so
no deployment has to hold it in plain text (docs/design.md section 10, Secrets):

    providers:
      openai:
        driver: openai
        apiKey: {secret: prod/openai-key}            # Secrets Manager (name or ARN)
      local:
        driver: openai-compatible
        apiKey: {secret: /agents/local-key}           # SSM: a name starting with '/'
      shared:
        driver: anthropic
        apiKey: {secret: prod/keys, field: anthropic}  # one field of a JSON secret

It is fetched with Powertools Parameters (`aws-lambda-powertools`, the
`lambda` extra), decrypted, and cached for `SECRET_MAX_AGE_SECONDS` per
process, so a warm Lambda reads it once in that window and a rotated key is
picked up after it. A failure names the provider and the secret, never a
value; the value is held only by the provider's client.
"""

from __future__ import annotations

import json
import re
from typing import Final

from agent_runtime.errors import StepFailed

SECRET_MAX_AGE_SECONDS: Final = 300
_AWS_ERROR_CODE = re.compile(r"\(([A-Za-z]+)\) when calling")


def is_ssm_parameter(name: str) -> bool:
    """SSM parameter names (and ARNs) versus Secrets Manager secrets."""
    return name.startswith("/") or name.startswith("arn:aws:ssm:") or ":ssm:" in name


def read_secret(name: str, *, field: str | None, provider: str) -> str:
    """The secret's value (or its JSON `field`) for `provider`'s key."""
    where = f"model provider {provider!r}: apiKey names the secret {name!r}"
    try:
        from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415
    except ImportError:
        raise StepFailed("provider_config_invalid",
                         f"{where}, which needs aws-lambda-powertools and boto3 "
                         "(pip install 'agent-runtime[lambda,aws]')") from None
    try:
        if is_ssm_parameter(name):
            value = parameters.get_parameter(name, decrypt=True,
                                             max_age=SECRET_MAX_AGE_SECONDS)
        else:
            value = parameters.get_secret(name, max_age=SECRET_MAX_AGE_SECONDS)
    except parameters.exceptions.GetParameterError as error:
        # Powertools wraps the AWS error in its text; the error code (AccessDenied,
        # ResourceNotFoundException...) says what to fix and never holds a value.
        code = _AWS_ERROR_CODE.search(str(error))
        raise StepFailed("provider_credentials_missing",
                         f"{where}, which could not be read "
                         f"({code.group(1) if code else type(error).__name__})") from None
    if not isinstance(value, str) or not value:
        raise StepFailed("provider_credentials_missing", f"{where}, which holds no text")
    if field is None:
        return value
    try:
        document = json.loads(value)
    except ValueError:
        raise StepFailed("provider_config_invalid",
                         f"{where} with field {field!r}, but the secret is not JSON") from None
    picked = document.get(field) if isinstance(document, dict) else None
    if not isinstance(picked, str) or not picked:
        raise StepFailed("provider_credentials_missing",
                         f"{where}, which has no text field {field!r}")
    return picked
