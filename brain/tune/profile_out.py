"""The tuned profile: the original's settings with the chosen speculative setting and a
``tuned`` section (what was chosen, when, where the evidence is), written beside the original
(``NAME.tuned.yaml``) or over it (``--apply``, the original kept as ``NAME.yaml.orig``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from brain.profiles import load_spec_text, parse_yaml_source, read_source_text
from brain.spec import ServerSpec, TunedSpec
from brain.tune.candidates import Candidate, candidate_spec
from brain.tune.models import TuneReport


def _candidate(label: str) -> Candidate:
    if label == "off":
        return Candidate("off")
    method, _, k = label.partition(":")
    return Candidate(method, int(k))  # type: ignore[arg-type]


def tuned_data(
    spec: ServerSpec, original: dict[str, Any], report: TuneReport, evidence: Path
) -> dict[str, Any]:
    """The original profile's mapping with the choice and the ``tuned`` section."""
    chosen = candidate_spec(spec, _candidate(report.choice), port=spec.port, share=1)
    data = dict(original)
    data["speculative"] = (
        chosen.speculative.model_dump(mode="json", exclude_defaults=True)
        if chosen.speculative is not None
        else None
    )
    c, _, depth = report.choice_point.partition(", depth ")
    tuned = TunedSpec(
        choice=report.choice,
        measured_at=report.ended_at or report.started_at,
        evidence=str(evidence),
        concurrency=int(c[2:]) if c.startswith("c=") else None,
        depth=depth or None,
        note="; ".join(x for x in [report.depth_note] if x)
        or next((n for n in report.notes if n.startswith("chosen")), ""),
    )
    data["tuned"] = tuned.model_dump(mode="json", exclude_none=True)
    return data


def write_tuned(profile: Path, report: TuneReport, evidence: Path, *, apply: bool) -> Path:
    """Write the tuned profile; it is loaded back before it is kept, so it is a valid one."""
    text = read_source_text(profile, "profile")
    spec = load_spec_text(text, source=str(profile))
    original, _lines = parse_yaml_source(text, str(profile))
    data = tuned_data(spec, original, report, evidence)
    header = (
        f"# Tuned by `brain tune` at {report.ended_at} from {profile.name}: speculative = "
        f"{report.choice} ({report.choice_point}).\n# Evidence: {evidence}\n"
    )
    body = header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    load_spec_text(body, source=str(profile))  # a tuned profile that would not load is a bug
    if apply:
        shutil.copyfile(profile, profile.with_name(profile.name + ".orig"))
        target = profile
    else:
        target = profile.with_name(profile.name.rsplit(".", 1)[0] + ".tuned.yaml")
    target.write_text(body, encoding="utf-8")
    return target
