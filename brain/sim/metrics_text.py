"""Prometheus text exposition, written and read back, for the sim's ``/metrics``.

The sim must look like vLLM on the wire (``vllm:`` names, ``model_name``/``engine`` labels,
counters exposed with ``_total``, histograms as ``_bucket``/``_sum``/``_count``) without pulling
in prometheus_client. ``parse_metrics`` is the small reader the sim's own tests use; the brain
has its own reader in ``brain/metrics.py`` and must not depend on this module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels_text(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@dataclass
class _Family:
    name: str
    help: str
    kind: str  # "counter" | "gauge" | "histogram"
    buckets: tuple[float, ...] = ()
    values: dict[Labels, float] = field(default_factory=dict)
    hist: dict[Labels, list[float]] = field(default_factory=dict)  # bucket counts + [sum, count]
    base: bool = True  # the registry's base labels come first (False: the family names its own)


class MetricsRegistry:
    """A few metric families, kept in the order they were declared (as prometheus_client does)."""

    def __init__(self, base_labels: Mapping[str, str]):
        self._base: Labels = tuple(base_labels.items())
        self._families: dict[str, _Family] = {}

    def declare(
        self,
        name: str,
        help_text: str,
        kind: str,
        buckets: Sequence[float] = (),
        *,
        base: bool = True,
    ) -> None:
        self._families[name] = _Family(name, help_text, kind, tuple(buckets), base=base)

    def _key(self, family: _Family, extra: Mapping[str, str] | None) -> Labels:
        own = tuple((extra or {}).items())
        return self._base + own if family.base else own

    def set(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        family = self._families[name]
        family.values[self._key(family, labels)] = float(value)

    def inc(
        self,
        name: str,
        amount: float = 1.0,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        family = self._families[name]
        key = self._key(family, labels)
        family.values[key] = family.values.get(key, 0.0) + float(amount)

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        family = self._families[name]
        key = self._key(family, labels)
        slots = family.hist.setdefault(key, [0.0] * (len(family.buckets) + 2))
        for i, bound in enumerate(family.buckets):
            if value <= bound:
                slots[i] += 1
        slots[-2] += value
        slots[-1] += 1

    def ensure(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Make a series exist at zero, so scrapers see it before the first event."""
        family = self._families[name]
        key = self._key(family, labels)
        if family.kind == "histogram":
            family.hist.setdefault(key, [0.0] * (len(family.buckets) + 2))
        else:
            family.values.setdefault(key, 0.0)

    def render(self) -> str:
        lines: list[str] = []
        for family in self._families.values():
            exposed = family.name + ("_total" if family.kind == "counter" else "")
            lines.append(f"# HELP {exposed} {family.help}")
            lines.append(f"# TYPE {exposed} {family.kind}")
            if family.kind != "histogram":
                for labels, value in family.values.items():
                    lines.append(f"{exposed}{_labels_text(labels)} {_fmt(value)}")
                continue
            for labels, slots in family.hist.items():
                for bound, count in zip(family.buckets, slots, strict=False):
                    le = (*labels, ("le", _fmt(bound)))
                    lines.append(f"{family.name}_bucket{_labels_text(le)} {_fmt(count)}")
                inf = (*labels, ("le", "+Inf"))
                lines.append(f"{family.name}_bucket{_labels_text(inf)} {_fmt(slots[-1])}")
                lines.append(f"{family.name}_count{_labels_text(labels)} {_fmt(slots[-1])}")
                lines.append(f"{family.name}_sum{_labels_text(labels)} {_fmt(slots[-2])}")
        return "\n".join(lines) + "\n"


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """Every sample line of a Prometheus text exposition (comments skipped)."""
    samples: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        labels = {
            k: v.replace('\\"', '"').replace("\\\\", "\\")
            for k, v in _LABEL.findall(match.group(3) or "")
        }
        samples.append(Sample(match.group(1), labels, float(match.group(4))))
    return samples


def metric_value(samples: Sequence[Sample], name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0.0 when none)."""
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )
