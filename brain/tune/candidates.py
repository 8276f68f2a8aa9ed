"""The settings a tune tries: ``off``, ``ngram:K``, ``mtp:K``, ``draft:K``; parsed from the
command line and checked against the profile (MTP only where the profile's model drafts with
MTP layers, a draft model only where the profile names one), each turned into a ServerSpec."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from brain.errors import BrainError
from brain.spec import ServerSpec, SpeculativeSpec

Method = Literal["off", "ngram", "mtp", "draft"]
METHODS: tuple[Method, ...] = ("off", "ngram", "mtp", "draft")
DEFAULT_KS = (1, 2, 3, 4)
NGRAM_EXTRA = {"prompt_lookup_max": 4, "prompt_lookup_min": 2}
"""vLLM's n-gram lookup window, as the lent-H200 runs used it."""


class TuneError(BrainError):
    """The tune cannot run as asked: a bad candidate, profile, replay or option."""


@dataclass(frozen=True, order=True)
class Candidate:
    method: Method
    k: int = 0

    @property
    def label(self) -> str:
        return "off" if self.method == "off" else f"{self.method}:{self.k}"

    @property
    def slug(self) -> str:
        return "off" if self.method == "off" else f"{self.method}{self.k}"


OFF = Candidate("off")


def _ks(text: str, item: str) -> list[int]:
    """``2`` / ``1-4`` / ``2|3`` -> the k values, each 1..8."""
    if re.fullmatch(r"\d+-\d+", text):
        lo, hi = (int(x) for x in text.split("-"))
        ks = list(range(lo, hi + 1))
    elif re.fullmatch(r"\d+(\|\d+)*", text):
        ks = [int(x) for x in text.split("|")]
    else:
        raise TuneError(f"candidate {item!r}: k must be a number, a range 1-4 or a list 2|3")
    if not ks or any(k < 1 or k > 8 for k in ks):
        raise TuneError(f"candidate {item!r}: k must be between 1 and 8")
    return ks


def parse_candidates(text: str, spec: ServerSpec) -> list[Candidate]:
    """``off,ngram:2,ngram:3,mtp:1-4`` -> candidates, ``off`` first and always present (it is
    what every other one is measured against); a method alone means k 1..4."""
    found: list[Candidate] = [OFF]
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        method, _, ks = item.partition(":")
        if method not in METHODS:
            raise TuneError(
                f"candidate {item!r}: unknown method {method!r} (use off, ngram:K, mtp:K, draft:K)"
            )
        if method == "off":
            if ks:
                raise TuneError(f"candidate {item!r}: off takes no k")
            continue
        _check_method(method, spec, item)
        for k in _ks(ks, item) if ks else DEFAULT_KS:
            cand = Candidate(method, k)  # type: ignore[arg-type]
            if cand not in found:
                found.append(cand)
    if len(found) < 2:
        raise TuneError("give at least one candidate besides off (e.g. -C off,ngram:2,ngram:4)")
    return found


def has_mtp(spec: ServerSpec) -> bool:
    """Whether the profile's model drafts with MTP layers: its speculative setting says
    ``method: mtp`` or names an MTP assistant (Gemma 4's separate checkpoint)."""
    s = spec.speculative
    return s is not None and (s.method == "mtp" or (s.method is None and s.model is not None))


def _check_method(method: str, spec: ServerSpec, item: str) -> None:
    s = spec.speculative
    if method == "mtp" and not has_mtp(spec):
        raise TuneError(
            f"candidate {item!r}: {spec.model} has no MTP layers the profile names (its "
            "speculative.method is not mtp and names no MTP assistant); drop mtp or use a "
            "profile whose model has them"
        )
    if method == "draft" and (s is None or not s.model or s.method == "mtp"):
        raise TuneError(
            f"candidate {item!r}: the profile names no draft model (speculative.model with "
            "method draft_model)"
        )


def candidate_spec(spec: ServerSpec, cand: Candidate, *, port: int, share: int) -> ServerSpec:
    """The profile's spec serving ``cand``: its own name and port, and with ``share`` servers
    on one GPU each gets that fraction of the profile's memory."""
    base = spec.speculative
    speculative: SpeculativeSpec | None
    if cand.method == "off":
        speculative = None
    elif cand.method == "ngram":
        extra = dict(base.extra) if base is not None and base.method == "ngram" else NGRAM_EXTRA
        speculative = SpeculativeSpec(method="ngram", num_speculative_tokens=cand.k, extra=extra)
    else:
        assert base is not None  # parse_candidates checked it
        speculative = base.model_copy(update={"num_speculative_tokens": cand.k})
    return spec.model_copy(
        update={
            "name": f"{spec.name}-tune-{cand.slug}",
            "port": port,
            "speculative": speculative,
            "gpu_memory_utilization": round(spec.gpu_memory_utilization / max(1, share), 3),
        }
    )


def from_spec(spec: ServerSpec) -> Candidate:
    """The candidate a spec serves (what ``brain up`` is running now)."""
    s = spec.speculative
    if s is None:
        return OFF
    if s.method == "ngram":
        return Candidate("ngram", s.num_speculative_tokens)
    if has_mtp(spec):
        return Candidate("mtp", s.num_speculative_tokens)
    return Candidate("draft", s.num_speculative_tokens)
