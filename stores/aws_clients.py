"""The AWS clients of the stores and the Lambda functions, made by botocore, not boto3.

Every AWS call here goes through a low-level client, and a low-level client is
botocore's: boto3 wraps the session that makes one, and adds resources and S3
transfers, which nothing here uses. Importing boto3 also imports s3transfer
(and, through it, multiprocessing): about 13 ms of every Lambda cold start
(bench/layer_cold_import.py), spent on nothing a handler calls. The clients
are the same either way, and so is their configuration: credentials, region
(AWS_REGION / AWS_DEFAULT_REGION), endpoints (AWS_ENDPOINT_URL and its
per-service forms), retries.

`client(service)` comes from one session per process, as `boto3.client`'s
from boto3's default session; `session(region)` is a new session, as
`boto3.session.Session(region_name=...)` is. boto3 stays what the Bedrock
driver and Powertools' parameters (secrets) use, imported only by them.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import botocore.session
from botocore.config import Config

# The process's session is not safe to make clients from on several threads at
# once; the clients it makes are.
_making = threading.Lock()


def session(region: str | None = None) -> botocore.session.Session:
    """A new session; in `region` when given, else in the configured one."""
    made = botocore.session.get_session()
    if region:
        made.set_config_variable("region", region)
    return made


@functools.cache
def _process_session() -> botocore.session.Session:
    return session()


def client(service: str, *, config: Config | None = None) -> Any:
    """A client of `service` from this process's session (typed by its caller)."""
    with _making:
        return _process_session().create_client(service, config=config)


def client_in(made: botocore.session.Session, service: str, *,
              endpoint_url: str | None = None) -> Any:
    """A client of `service` from `made` (a `session` of the caller's own), at
    `endpoint_url` when given (typed by its caller)."""
    return made.create_client(service, endpoint_url=endpoint_url)


__all__ = ["client", "client_in", "session"]
