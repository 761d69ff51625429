"""A real OTLP/HTTP receiver on 127.0.0.1 for tests: it decodes what exporters POST
to `/v1/traces` and `/v1/metrics` with OpenTelemetry's own protobuf classes.

    with otlp_receiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        ...
        receiver.spans()    # [(resource attributes, span)]
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

MAX_BODY = 16 * 1024 * 1024


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in value.array_value.values]
    return None if kind is None else getattr(value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass
class Receiver:
    endpoint: str = ""
    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spans(self) -> list[tuple[dict[str, Any], Span]]:
        with self.lock:
            return [(attributes(resource.resource.attributes), span)
                    for request in self.traces for resource in request.resource_spans
                    for scope in resource.scope_spans for span in scope.spans]

    def metric_names(self) -> dict[str, dict[str, Any]]:
        """Metric name -> the resource attributes it came with."""
        with self.lock:
            return {metric.name: attributes(resource.resource.attributes)
                    for request in self.metrics for resource in request.resource_metrics
                    for scope in resource.scope_metrics for metric in scope.metrics}


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY or self.headers.get("Content-Type") != \
                    "application/x-protobuf":
                receiver.refused.append(f"{self.path} {self.headers.get('Content-Type')}")
                self.send_response(400)
                self.end_headers()
                return
            body = self.rfile.read(length)
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            answer: bytes
            if self.path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.traces.append(request)
                answer = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                metrics = ExportMetricsServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.metrics.append(metrics)
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                receiver.refused.append(self.path)
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: a test's output is its assertions

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    host, port = server.server_address[:2]
    receiver.endpoint = f"http://{host}:{port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
