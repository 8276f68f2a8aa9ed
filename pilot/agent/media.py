"""Images on their way to the model, as the loop decides it: sent, as what, or refused.

``pilot.agent.images`` knows images (references, transports, decoding); this module makes the
loop's decisions with it from the folded state and the run's media plan: the messages as
sent, a tool's images placed or refused, a server's media error turned into the fallback to
record. Pure but for the materializer's file reads.
"""

from __future__ import annotations

from typing import Any

from pilot import events as ev
from pilot.agent.images import (
    Materializer,
    MediaPlan,
    choose_transport,
    classify_media_error,
    has_images,
    refused_output,
    undecodable,
)
from pilot.agent.state import RunState
from pilot.errors import BadRequest


def request_messages(
    state: RunState, messages: list[dict[str, Any]], media: Materializer
) -> list[dict[str, Any]]:
    """The messages as sent: image placeholders replaced by their URLs (pilot.agent.images)."""
    if not state.images or not has_images(messages):  # no image yet: skip the scan
        return list(messages)
    refused = state.images_refused
    return media.materialize(
        messages,
        state.images,
        data_only=state.images_data_only,
        refused=None if refused is None else f"the server refused images ({refused})",
        dropped=state.images_dropped,
    )


def vision_refusal(state: RunState, plan: MediaPlan) -> str | None:
    """Why this run cannot show images to the model, or None."""
    if state.images_refused is not None:
        return f"the server said: {state.images_refused}"
    if plan.vision is False:
        return "the workflow or the server profile says the model has no vision"
    return None


def place_images(finished: ev.ToolFinished, state: RunState, plan: MediaPlan) -> ev.ToolFinished:
    """Decide how a tool's images travel, or refuse them when the model cannot see."""
    if not finished.images:
        return finished
    reason = vision_refusal(state, plan)
    if reason is not None:
        sources = ", ".join(ref.source for ref in finished.images)
        return finished.model_copy(
            update={"output": refused_output(sources, reason), "is_error": True, "images": []}
        )
    images = [choose_transport(ref, plan) for ref in finished.images]
    return finished.model_copy(update={"images": images})


def image_fallback(exc: BadRequest, state: RunState) -> ev.ImageFallback | None:
    """vLLM's media errors: file:// refused -> data URLs from now on (once); bytes it cannot
    decode (or any 400 while some image does not decode here) -> those images left out;
    images refused at all -> left out of requests. The event to record; None for any other
    error."""
    message = str(exc).split("): ", 1)[-1]
    kind = classify_media_error(message)
    if not has_images(state.messages):
        return None
    if kind in (None, "image_data") and state.images_refused is None:
        # Pillow's texts for bad bytes are many ("Truncated File Read", ...): whatever the
        # 400 says, images that do not decode here either are what the server refused.
        kept = [r for sha, r in state.images.items() if sha not in state.images_dropped]
        if bad := undecodable(kept):
            return ev.ImageFallback(error=message, action="drop", images=bad)
    if kind is None:
        return None
    if kind == "local_path" and not state.images_data_only:
        return ev.ImageFallback(error=message, action="data_url")
    if state.images_refused is None:
        return ev.ImageFallback(error=message, action="drop")
    return None
