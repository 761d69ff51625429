"""What `serve`'s access log keeps of a request: the method and the path, never the query.

A query string may carry what a client should have sent in a header (a
`?token=...` pasted from a link, a cursor, a run id of another tenant's
guessing); the access log is read by whoever operates the host, and kept
longer than any request. uvicorn writes the request line as it came, so a
filter on its access logger takes the query off every request line before
the record is formatted: `"GET /runs?token=abc HTTP/1.1" 200` is logged as
`"GET /runs HTTP/1.1" 200`.
"""

from __future__ import annotations

import logging
import re

ACCESS_LOGGER = "uvicorn.access"

# The quoted request line of an access record: a method, a path (uvicorn
# writes `"` in it as %22) and the query after `?`, up to the next space or quote.
_QUERY_IN_REQUEST_LINE = re.compile(r'("[A-Z]+ [^ ?"]*)\?[^ "]*')


class QueryStringFilter(logging.Filter):
    """Rewrites an access record without the query string of its request line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = _QUERY_IN_REQUEST_LINE.sub(r"\1", message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, ()
        return True


def hide_query_strings(logger_name: str = ACCESS_LOGGER) -> None:
    """Install the filter on the access logger (once, however often called)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(each, QueryStringFilter) for each in logger.filters):
        logger.addFilter(QueryStringFilter())
