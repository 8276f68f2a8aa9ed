"""A run's spans through the OpenTelemetry SDK: OTLP JSON lines, or OTLP/HTTP to an endpoint.

The SDK is the optional extra (``pip install 'marathon[otel]'``) and is imported here, inside
the functions, never at import time. The spans become the SDK's own ``ReadableSpan`` with the
ids of ``pilot.trace.ids`` and the times of the events, and the SDK's OTLP encoder makes the
protobuf request both outputs carry, so the file and the wire hold the same spans.

The file is OTLP JSON lines (one ``ExportTraceServiceRequest`` a line, as the Collector's
``otlpjsonfile`` receiver and OTLP/HTTP JSON receivers read it): protobuf's JSON mapping of that
request, with the ids in hex and enums as integers, as the OTLP specification asks of its JSON
encoding. The OpenTelemetry project's own JSON-lines exporter
(``opentelemetry-exporter-otlp-json-file``) is a beta that pins
``opentelemetry-exporter-otlp-common`` to another release than the current OTLP/HTTP exporter
needs; the two in one extra cannot be installed together at their latest versions.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pilot import __version__
from pilot.errors import ConfigurationError, MarathonError
from pilot.trace import semconv as sc
from pilot.trace.ids import span_id, trace_id
from pilot.trace.spans import RunTrace, TraceSpan

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

INSTALL_HINT = "pip install 'marathon[otel]'"
BATCH = 512
"""Spans per request (per line of the file): the SDK's batch processor's default export size."""
_TRACES_PATH = "/v1/traces"
_SDK_MODULES = (
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.otlp.proto.common.trace_encoder",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)
"""What the extra brings: the SDK's spans, the OTLP encoder, the OTLP/HTTP exporter."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TraceExtraMissing(ConfigurationError):
    """The OpenTelemetry SDK (the ``otel`` extra) is not installed."""


class TraceNotSent(MarathonError):
    """The OTLP endpoint did not take the spans."""


def require_sdk() -> None:
    """Import the SDK's parts now, or say how to install them."""
    try:
        for module in _SDK_MODULES:
            importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or "opentelemetry"
        raise TraceExtraMissing(
            f"exporting a trace needs the OpenTelemetry SDK ({missing} is not installed); "
            f"install the extra: {INSTALL_HINT}"
        ) from None


def _nanos(at: datetime) -> int:
    """Nanoseconds since the epoch, exactly (the stored times have microseconds)."""
    return (at - _EPOCH) // timedelta(microseconds=1) * 1000


def readable_spans(trace: RunTrace) -> list[ReadableSpan]:
    """The SDK's spans for ``trace`` (parents first)."""
    require_sdk()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    resource = Resource({"service.name": sc.SERVICE_NAME, "service.version": __version__})
    scope = InstrumentationScope(sc.SCOPE_NAME, __version__)
    tid = trace_id(trace.run_id)

    def context(key: str) -> SpanContext:
        sid = span_id(trace.run_id, key)
        return SpanContext(tid, sid, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def convert(span: TraceSpan) -> ReadableSpan:
        assert span.end is not None, "spans are closed by build_trace"
        status = Status(StatusCode.ERROR, span.error) if span.error else Status(StatusCode.UNSET)
        return ReadableSpan(
            name=span.name,
            context=context(span.key),
            parent=context(span.parent) if span.parent else None,
            resource=resource,
            attributes=span.attributes,
            events=[Event(e.name, e.attributes, _nanos(e.at)) for e in span.events],
            kind=SpanKind.CLIENT if span.kind == "client" else SpanKind.INTERNAL,
            status=status,
            start_time=_nanos(span.start),
            end_time=_nanos(span.end),
            instrumentation_scope=scope,
        )

    return [convert(span) for span in trace.spans]


def _batches(spans: list[ReadableSpan]) -> Iterator[list[ReadableSpan]]:
    for start in range(0, len(spans), BATCH):
        yield spans[start : start + BATCH]


def otlp_json(request: Any) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` (protobuf) in OTLP's JSON encoding: protobuf's JSON
    mapping, enums as integers, and the ids in hex where that mapping writes bytes as base64
    (only the spans' and their links' ids are bytes: the attributes hold none)."""
    from base64 import b64decode

    from google.protobuf.json_format import MessageToDict

    data = MessageToDict(request, use_integers_for_enums=True)
    for resource in data.get("resourceSpans", ()):
        for scope in resource.get("scopeSpans", ()):
            for span in scope.get("spans", ()):
                for holder in (span, *span.get("links", ())):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in holder:
                            holder[key] = b64decode(holder[key]).hex()
    return data


def json_lines(trace: RunTrace) -> Iterator[str]:
    """The trace as OTLP JSON lines (each an ``ExportTraceServiceRequest``, no newline)."""
    spans = readable_spans(trace)
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    for batch in _batches(spans):
        yield json.dumps(otlp_json(encode_spans(batch)), separators=(",", ":"), ensure_ascii=False)


def write_json_lines(trace: RunTrace, stream: IO[str]) -> int:
    """Write the trace's lines to ``stream``; returns how many lines (requests) were written."""
    lines = list(json_lines(trace))  # all encoded before the first byte is written
    stream.writelines(line + "\n" for line in lines)
    return len(lines)


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of ``endpoint``: a collector's base URL
    (``http://127.0.0.1:4318``) gets ``/v1/traces``; a URL with a path is used as given."""
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(
            f"--endpoint {endpoint!r} is not an http(s) URL; give the OTLP/HTTP receiver's "
            "address, e.g. http://127.0.0.1:4318 (a collector's OTLP/HTTP port)"
        )
    path = parts.path if parts.path not in ("", "/") else _TRACES_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class _Complaints(logging.Handler):
    """What the exporter logs while it sends (it reports failures by logging, not raising)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _listening() -> Iterator[_Complaints]:
    logger = logging.getLogger("opentelemetry.exporter.otlp")
    handler, propagate = _Complaints(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def send(trace: RunTrace, endpoint: str, *, timeout: float = 10.0) -> int:
    """Send the trace to the OTLP/HTTP receiver at ``endpoint`` (protobuf); returns how many
    requests were sent. ``OTEL_EXPORTER_OTLP_HEADERS`` applies (the exporter reads it)."""
    url = traces_url(endpoint)
    spans = readable_spans(trace)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
    sent = 0
    try:
        with _listening() as complaints:
            for batch in _batches(spans):
                if exporter.export(batch) is not SpanExportResult.SUCCESS:
                    said = complaints.messages[-1] if complaints.messages else "no reason given"
                    raise TraceNotSent(
                        f"the OTLP receiver at {url} did not take the trace ({said}); check "
                        "that a collector listens there for OTLP/HTTP (its port 4318; 4317 is "
                        "gRPC, which this export does not speak)"
                    )
                sent += 1
    finally:
        exporter.shutdown()
    return sent
