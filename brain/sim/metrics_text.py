"""The sim's ``/metrics``: its families in a ``prometheus_client`` registry of their own, served
by ``prometheus_client``'s own ASGI app, as vLLM serves its registry (``make_asgi_app`` mounted
at ``/metrics`` in ``vllm/v1/metrics/prometheus.py``).

So the wire is vLLM's by construction, not by imitation: counters with ``_total`` and their
``_created`` gauges, histograms as ``_bucket``/``_count``/``_sum``/``_created``, labels in
sorted order, Go-style numbers (``1.5e+09``), OpenMetrics for a client that asks for it, gzip
for one that accepts it. ``parse_metrics`` (what the sim's tests read with) is
``prometheus_client``'s parser, a reader independent of the brain's (``brain/metrics.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.asgi import make_asgi_app
from prometheus_client.parser import text_string_to_metric_families

_KINDS: dict[str, Any] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


class MetricsRegistry:
    """Metric families by name, each with the registry's base labels (``model_name``,
    ``engine``) first unless it names its own, kept in the order they were declared."""

    def __init__(self, base_labels: Mapping[str, str]):
        self.registry = CollectorRegistry()
        self._base = dict(base_labels)
        self._families: dict[str, tuple[Any, bool]] = {}

    def declare(
        self,
        name: str,
        help_text: str,
        kind: str,
        buckets: Sequence[float] = (),
        *,
        labels: Sequence[str] = (),
        base: bool = True,
    ) -> None:
        """A family ``kind`` (counter, gauge, histogram); ``labels`` are the ones it adds to
        the base labels (or, with ``base=False``, all of its labels)."""
        names = [*self._base, *labels] if base else list(labels)
        options: dict[str, Any] = {"buckets": tuple(buckets)} if kind == "histogram" else {}
        family = _KINDS[kind](name, help_text, labelnames=names, registry=self.registry, **options)
        self._families[name] = (family, base)

    def _series(self, name: str, labels: Mapping[str, str] | None) -> Any:
        family, base = self._families[name]
        values = {**self._base, **(labels or {})} if base else dict(labels or {})
        return family.labels(**values) if values else family

    def set(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        self._series(name, labels).set(value)

    def track(
        self, name: str, read: Callable[[], float], labels: Mapping[str, str] | None = None
    ) -> None:
        """A gauge read from ``read()`` at each scrape (what the scheduler has now)."""
        self._series(name, labels).set_function(read)

    def inc(
        self,
        name: str,
        amount: float = 1.0,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self._series(name, labels).inc(amount)

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        self._series(name, labels).observe(value)

    def ensure(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Make a series exist at zero, so scrapers see it before the first event."""
        self._series(name, labels)

    def render(self) -> str:
        """The Prometheus text a plain scrape gets."""
        return generate_latest(self.registry).decode()

    def asgi_app(self) -> Any:
        """``/metrics`` as vLLM serves it: ``prometheus_client``'s ASGI app on this registry."""
        return make_asgi_app(registry=self.registry)


METRICS_PATH = re.compile("^/metrics(?P<path>.*)$")
"""What the mount matches: ``/metrics`` itself too, where Starlette's mount would redirect it
to ``/metrics/`` (vLLM mounts with the same pattern)."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition, read by ``prometheus_client``'s parser."""
    return [
        Sample(sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def metric_value(samples: Sequence[Sample], name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0.0 when none)."""
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )
