"""Images, the pure parts: sniffing, shrinking, storage, how an image travels, the media errors,
the fold, and the sim's image rules and token count."""

from __future__ import annotations

import base64
import hashlib
import io
import struct
import zlib
from pathlib import Path

import pytest
from image_bytes import gif, jpeg_header, png, webp_lossless_header

import tools.images as timg
from brain.sim.errors import SimHTTPError
from brain.sim.media import check_images
from brain.sim.tokenizer import IMAGE_TOKENS, count_chat
from brain.spec import ServerSpec
from brain.spec_paths import VolumeSpec
from pilot import events as ev
from pilot.agent.images import (
    ImageRef,
    Materializer,
    MediaPlan,
    choose_transport,
    classify_media_error,
    has_images,
    refs_from_artifacts,
)
from pilot.agent.state import fold
from tools.base import ToolContext
from tools.registry import default_registry
from tools.workspace import Workspace


def ctx_for(root: Path, tmp: Path, **settings: object) -> ToolContext:
    return ToolContext(
        workspace=Workspace(root),
        artifacts_dir=tmp / "artifacts",
        settings={"view_image": dict(settings)} if settings else {},
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "shots").mkdir(parents=True)
    (root / "shots" / "a.png").write_bytes(png(8, 6))
    (root / "notes.txt").write_text("not an image\n")
    return root


# -- sniffing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fmt", "size"),
    [
        (png(4, 3), "png", (4, 3)),
        (jpeg_header(640, 480), "jpeg", (640, 480)),
        (webp_lossless_header(300, 200), "webp", (300, 200)),
        (gif(), "gif", (1, 1)),
    ],
)
def test_sniff_image_reads_format_and_size_from_the_first_bytes(data, fmt, size) -> None:
    info = timg.sniff_image(data)
    assert info is not None and info.format == fmt and (info.width, info.height) == size


def test_sniff_image_counts_gif_frames_and_refuses_other_bytes() -> None:
    assert timg.sniff_image(gif(frames=3)).frames == 3  # type: ignore[union-attr]
    assert timg.sniff_image(b"hello world") is None
    assert timg.sniff_image(b"%PDF-1.7\n") is None
    assert timg.sniff_image(b"\x89PNG\r\n\x1a\n") is not None  # header only: format, no size


def test_sniff_image_agrees_with_pillow_on_real_jpeg_and_webp() -> None:
    Image = pytest.importorskip("PIL.Image")
    for fmt, options in (("JPEG", {}), ("WEBP", {"lossless": False}), ("WEBP", {"lossless": True})):
        buffer = io.BytesIO()
        Image.new("RGB", (123, 45), (10, 200, 30)).save(buffer, format=fmt, **options)
        info = timg.sniff_image(buffer.getvalue())
        assert info is not None and (info.width, info.height) == (123, 45), fmt


# -- the tool --------------------------------------------------------------------------------


def test_view_image_stores_the_bytes_under_their_sha256_and_returns_an_image_artifact(
    ws: Path, tmp_path: Path
) -> None:
    result = default_registry().invoke("view_image", {"path": "shots/a.png"}, ctx_for(ws, tmp_path))
    assert not result.is_error, result.output
    assert "shots/a.png: PNG, 8x6" in result.output
    [artifact] = result.artifacts
    data = (ws / "shots" / "a.png").read_bytes()
    assert Path(artifact.path).name == hashlib.sha256(data).hexdigest() + ".png"
    assert Path(artifact.path).read_bytes() == data
    assert artifact.media_type == "image/png" and artifact.name == "shots/a.png"


def test_view_image_refuses_a_non_image_file_saying_what_it_is(ws: Path, tmp_path: Path) -> None:
    result = default_registry().invoke("view_image", {"path": "notes.txt"}, ctx_for(ws, tmp_path))
    assert result.is_error
    assert "not an image" in result.output and "PNG, JPEG, WebP, GIF" in result.output
    assert not (tmp_path / "artifacts").exists()


def corrupt_png(width: int = 64, height: int = 48) -> bytes:
    """A valid PNG signature and IHDR (so the first bytes say "PNG, 64x48"), then garbage."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk + bytes(range(256)) * 4


def test_view_image_refuses_a_corrupt_image_whose_header_is_valid(ws: Path, tmp_path: Path) -> None:
    (ws / "shots" / "bad.png").write_bytes(corrupt_png())
    assert timg.sniff_image(corrupt_png()) == timg.ImageInfo("png", 64, 48)  # the header lies
    result = default_registry().invoke(
        "view_image", {"path": "shots/bad.png"}, ctx_for(ws, tmp_path)
    )
    assert result.is_error and not result.artifacts
    assert "shots/bad.png" in result.output
    assert "starts like a PNG image but its data does not decode" in result.output
    assert "corrupt or truncated" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "artifacts").exists()


def test_view_image_refuses_a_truncated_image(ws: Path, tmp_path: Path) -> None:
    whole = png(40, 30, noise=True)
    (ws / "cut.png").write_bytes(whole[: len(whole) // 2])
    result = default_registry().invoke("view_image", {"path": "cut.png"}, ctx_for(ws, tmp_path))
    assert result.is_error and "does not decode" in result.output


def test_view_image_checks_the_pixel_count_before_decoding(ws: Path, tmp_path: Path) -> None:
    result = default_registry().invoke(
        "view_image", {"path": "shots/a.png"}, ctx_for(ws, tmp_path, max_pixels=47)
    )
    assert result.is_error
    assert "8x6 pixels, over the 47-pixel limit" in result.output


def test_view_image_refuses_a_decompression_bomb_from_its_header(ws: Path, tmp_path: Path) -> None:
    header = corrupt_png(60_000, 60_000)  # 3.6 billion pixels claimed by a 1 KB file
    (ws / "bomb.png").write_bytes(header)
    result = default_registry().invoke("view_image", {"path": "bomb.png"}, ctx_for(ws, tmp_path))
    assert result.is_error
    assert "60000x60000 pixels, over the 40,000,000-pixel limit" in result.output


def test_view_image_refuses_paths_outside_the_workspace(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.png").write_bytes(png())
    result = default_registry().invoke(
        "view_image", {"path": "../outside.png"}, ctx_for(ws, tmp_path)
    )
    assert result.is_error and "outside" in result.output


def test_oversized_image_is_scaled_and_re_encoded_and_the_result_says_so(
    ws: Path, tmp_path: Path
) -> None:
    pytest.importorskip("PIL.Image")
    (ws / "big.png").write_bytes(png(300, 200, noise=True))
    ctx = ctx_for(ws, tmp_path, max_bytes=40_000, max_side=128)
    result = default_registry().invoke("view_image", {"path": "big.png"}, ctx)
    assert not result.is_error, result.output
    assert "scaled from 300x200 to 128x85" in result.output
    [artifact] = result.artifacts
    stored = Path(artifact.path).read_bytes()
    assert len(stored) <= 40_000
    info = timg.sniff_image(stored)
    assert info is not None and max(info.width or 0, info.height or 0) <= 128


def test_oversized_image_without_pillow_is_a_clear_error(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timg, "_pillow", lambda: None)
    (ws / "big.png").write_bytes(png(300, 200, noise=True))
    ctx = ctx_for(ws, tmp_path, max_bytes=40_000)
    result = default_registry().invoke("view_image", {"path": "big.png"}, ctx)
    assert result.is_error
    assert "Pillow is not installed" in result.output and "pip install" in result.output


def test_animated_gif_becomes_its_first_frame(ws: Path, tmp_path: Path) -> None:
    pytest.importorskip("PIL.Image")
    (ws / "anim.gif").write_bytes(gif(frames=3))
    result = default_registry().invoke("view_image", {"path": "anim.gif"}, ctx_for(ws, tmp_path))
    assert not result.is_error, result.output
    assert "first of 3 GIF frames" in result.output
    assert result.artifacts[0].media_type == "image/png"


# -- how it travels --------------------------------------------------------------------------


def ref_for(path: Path, **kw: object) -> ImageRef:
    data = path.read_bytes()
    fields = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "media_type": "image/png",
        "artifact": str(path),
        "source": path.name,
        "source_path": str(path),
        "size": len(data),
    }
    return ImageRef(**{**fields, **kw})  # type: ignore[arg-type]


def docker_spec(media_host: Path, **kw: object) -> ServerSpec:
    return ServerSpec(
        name="t",
        model="m",
        allowed_local_media_path="/media",
        docker={"volumes": [VolumeSpec(host=str(media_host), container="/media")]},
        **kw,  # type: ignore[arg-type]
    )


def test_docker_server_gets_file_url_with_the_container_side_path(tmp_path: Path) -> None:
    media = tmp_path / "media"
    (media / "ui").mkdir(parents=True)
    (media / "ui" / "shot.png").write_bytes(png())
    ref = choose_transport(ref_for(media / "ui" / "shot.png"), MediaPlan(server=docker_spec(media)))
    assert ref.url == "file:///media/ui/shot.png"


def test_data_url_when_the_file_is_outside_the_mount_or_re_encoded_or_unmanaged(
    tmp_path: Path,
) -> None:
    media = tmp_path / "media"
    media.mkdir()
    (media / "in.png").write_bytes(png())
    (tmp_path / "out.png").write_bytes(png())
    plan = MediaPlan(server=docker_spec(media))
    assert choose_transport(ref_for(tmp_path / "out.png"), plan).url is None
    assert choose_transport(ref_for(media / "in.png", original=False), plan).url is None
    assert choose_transport(ref_for(media / "in.png"), MediaPlan()).url is None
    no_flag = MediaPlan(server=ServerSpec(name="t", model="m", backend="process"))
    assert choose_transport(ref_for(media / "in.png"), no_flag).url is None


def test_process_and_sim_servers_see_host_paths_strictly_below_the_allowed_dir(
    tmp_path: Path,
) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.png").write_bytes(png())
    spec = ServerSpec(name="t", model="m", backend="sim", allowed_local_media_path=str(tmp_path))
    ref = choose_transport(ref_for(tmp_path / "m" / "a.png"), MediaPlan(server=spec))
    assert ref.url == (tmp_path / "m" / "a.png").as_uri()


def test_vllm_media_errors_are_recognised() -> None:
    assert classify_media_error("Cannot load local files without `--allowed-local-media-path`.")
    assert (
        classify_media_error(
            "The file path /x/a.png must be a subpath of `--allowed-local-media-path /media`."
        )
        == "local_path"
    )
    assert classify_media_error("Only base64 data URLs are supported for now.") == "data_url"
    assert classify_media_error("At most 0 image(s) may be provided in one prompt.") == "no_vision"
    assert (
        classify_media_error("cannot identify image file <_io.BytesIO object at 0x7f>")
        == "image_data"
    )
    assert classify_media_error("image file is truncated (3 bytes not processed)") == "image_data"
    assert classify_media_error("This model's maximum context length is 10 tokens.") is None


# -- the fold and what is sent ---------------------------------------------------------------


def test_fold_puts_tool_images_in_a_user_message_after_the_turns_last_result(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.png").write_bytes(png())
    ref = ref_for(tmp_path / "a.png")
    calls = [
        ev.ToolCall(id="c1", name="view_image", arguments="{}"),
        ev.ToolCall(id="c2", name="read_file", arguments="{}"),
    ]
    events = [
        ev.PhaseStarted(index=0, name="p", prompt="Look."),
        ev.AssistantMessage(step=1, tool_calls=calls),
        ev.ToolFinished(call_id="c1", name="view_image", output="Image a.png", images=[ref]),
        ev.ToolFinished(call_id="c2", name="read_file", output="text"),
    ]
    state = fold(events)
    roles = [m["role"] for m in state.messages]
    assert roles == ["user", "assistant", "tool", "tool", "user"]
    parts = state.messages[-1]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": "marathon-image:" + ref.sha256}}
    assert state.images == {ref.sha256: ref}


def test_materialize_sends_stored_bytes_and_file_urls_only_while_the_file_is_unchanged(
    tmp_path: Path,
) -> None:
    source = tmp_path / "a.png"
    source.write_bytes(png(4, 3))
    stored = tmp_path / "stored.png"
    stored.write_bytes(source.read_bytes())
    ref = ref_for(source, artifact=str(stored), url=source.as_uri())
    state = fold([ev.PhaseStarted(index=0, name="p", prompt="Look.", images=[ref])])
    assert has_images(state.messages)
    media = Materializer()

    def sent(**kw: object) -> str:
        [message] = media.materialize(state.messages, state.images, **kw)  # type: ignore[arg-type]
        return message["content"][1]["image_url"]["url"]

    assert sent() == source.as_uri()
    data_url = "data:image/png;base64," + base64.b64encode(stored.read_bytes()).decode()
    assert sent(data_only=True) == data_url
    source.write_bytes(png(5, 5))  # changed since it was viewed: the recorded bytes go instead
    assert sent() == data_url
    [message] = media.materialize(state.messages, state.images, refused="no vision")
    assert message["content"][1] == {"type": "text", "text": "[image not shown: no vision]"}


def test_refs_from_artifacts_knows_whether_the_stored_bytes_are_the_files_own(
    ws: Path, tmp_path: Path
) -> None:
    result = default_registry().invoke("view_image", {"path": "shots/a.png"}, ctx_for(ws, tmp_path))
    [ref] = refs_from_artifacts(result.artifacts, ws)
    assert ref.original and ref.source == "shots/a.png" and (ref.width, ref.height) == (8, 6)
    assert ref.source_path == str((ws / "shots" / "a.png").resolve())


def test_image_refs_survive_the_event_round_trip(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(png())
    event = ev.ToolFinished(
        call_id="c", name="view_image", output="x", images=[ref_for(tmp_path / "a.png")]
    )
    assert ev.event_from_json(ev.event_to_json(event)) == event
    old = '{"type": "tool_finished", "call_id": "c", "name": "read_file", "output": "x"}'
    assert ev.event_from_json(old).images == []  # type: ignore[union-attr]


# -- the sim ---------------------------------------------------------------------------------


def image_message(url: str, role: str = "user") -> dict:
    return {"role": role, "content": [{"type": "image_url", "image_url": {"url": url}}]}


def test_sim_counts_a_fixed_number_of_tokens_per_image() -> None:
    text = [{"role": "user", "content": [{"type": "text", "text": "look"}]}]
    one = [{"role": "user", "content": [*text[0]["content"], image_message("x")["content"][0]]}]
    assert count_chat(one) - count_chat(text) == IMAGE_TOKENS == 256


def test_sim_decodes_images_like_vllm_and_answers_with_pillows_message(tmp_path: Path) -> None:
    allowed = tmp_path / "media"
    allowed.mkdir()
    (allowed / "bad.png").write_bytes(corrupt_png())
    b64 = base64.b64encode(corrupt_png()).decode()
    for url, allowed_dir in (
        (f"data:image/png;base64,{b64}", None),
        ((allowed / "bad.png").as_uri(), str(allowed)),
    ):
        with pytest.raises(SimHTTPError) as caught:
            check_images([image_message(url)], vision=True, allowed_local_media_path=allowed_dir)
        assert caught.value.status == 400
        assert caught.value.message.startswith("cannot identify image file <_io.BytesIO object")


def test_sim_media_rules_use_vllms_messages(tmp_path: Path) -> None:
    allowed = tmp_path / "media"
    allowed.mkdir()
    (allowed / "a.png").write_bytes(png())
    (tmp_path / "b.png").write_bytes(png())
    (allowed / "t.txt").write_text("text")

    def error(url: str, **kw: object) -> str:
        options = {"vision": True, "allowed_local_media_path": str(allowed), **kw}
        with pytest.raises(SimHTTPError) as caught:
            check_images([image_message(url)], **options)  # type: ignore[arg-type]
        assert caught.value.status == 400
        return caught.value.message

    assert (
        check_images(
            [image_message((allowed / "a.png").as_uri(), "tool")],
            vision=True,
            allowed_local_media_path=str(allowed),
        )
        == 1
    )
    b64 = base64.b64encode(png()).decode()
    assert (
        check_images(
            [image_message(f"data:image/png;base64,{b64}")],
            vision=True,
            allowed_local_media_path=None,
        )
        == 1
    )
    assert error((allowed / "a.png").as_uri(), allowed_local_media_path=None) == (
        "Cannot load local files without `--allowed-local-media-path`."
    )
    assert error((tmp_path / "b.png").as_uri()) == (
        f"The file path {tmp_path / 'b.png'} must be a subpath of "
        f"`--allowed-local-media-path {allowed.resolve()}`."
    )
    assert (
        error("data:image/png;charset=utf-8,raw") == "Only base64 data URLs are supported for now."
    )
    assert (
        error("data:image/png,raw") == "not enough values to unpack (expected 2, got 1)"
    )  # as vLLM
    assert error(f"data:image/png;base64,{base64.b64encode(b'plain').decode()}").startswith(
        "cannot identify image file"
    )
    assert error((allowed / "t.txt").as_uri()).startswith("cannot identify image file")
    assert error(f"data:image/png;base64,{b64}", vision=False) == (
        "At most 0 image(s) may be provided in one prompt."
    )
