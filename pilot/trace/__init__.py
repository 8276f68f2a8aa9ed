"""The trace wing: a stored run as an OpenTelemetry trace, for the tools people already use.

Modules: ``ids`` (trace and span ids derived from the run id and the events' seq, so a
re-export gives the same ids), ``semconv`` (the attribute names, from the OpenTelemetry GenAI
semantic conventions, and the server an endpoint names), ``spans`` (the spans of a run, built
from its stored events alone: plain data, no OpenTelemetry import), ``otlp`` (those spans
through the OpenTelemetry SDK: OTLP JSON lines to a file, or OTLP/HTTP to an endpoint the user
names); ``pilot trace`` is ``pilot.front.trace_cli``.

The SDK is the optional extra ``marathon[otel]``; only ``otlp`` imports it, inside its
functions, so ``pilot --help`` and every other command never load it. This wing only reads the
store, and it opens no connection except to the endpoint the user names.
"""
