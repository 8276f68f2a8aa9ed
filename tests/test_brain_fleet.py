"""Fleets: GPU groups and ports per replica (pure), every replica's command line, and real sim
replicas started, listed, found by the pilot's ``fleet_endpoints``, restarted one by one by
their own supervisors, and stopped together."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from brain.cli import app
from brain.command import docker_run_command_line, process_environment
from brain.errors import BrainError, FleetNotRunning, SpecError
from brain.events import ServerEventWriter
from brain.fleet.plan import (
    check_fleet,
    fleet_endpoints,
    fleet_records,
    gpu_groups,
    load_fleet_file,
    parse_gpus,
    plan_replicas,
    replica_ports,
    shared_gpu_groups,
)
from brain.profiles import apply_overrides, load_profile
from brain.state import Registry

runner = CliRunner()
TP2 = "gemma4-e4b-mtp-tp2"


pytestmark = pytest.mark.usefixtures("marathon_home")


def brain(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def free_port_block(n: int) -> int:
    """A base port whose next ``n`` ports are all free, below the OS's ephemeral range (so
    ports the OS hands to parallel tests never land in it)."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - n)
        with ExitStack() as stack:
            try:
                for port in range(base, base + n):
                    s = stack.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise AssertionError("no block of free ports")


def health(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code
    except httpx.HTTPError:
        return None


# --------------------------------------------------------------------------- pure: GPUs, ports


def test_gpu_groups_follow_the_tensor_parallel_size():
    gpus = parse_gpus("0,1,2,3")
    assert gpu_groups(gpus, 2) == [["0", "1"], ["2", "3"]]
    assert gpu_groups(gpus, 1) == [["0"], ["1"], ["2"], ["3"]]
    assert gpu_groups(gpus, 4, replicas=1) == [["0", "1", "2", "3"]]
    assert parse_gpus([0, "GPU-abc"]) == ["0", "GPU-abc"]


def test_gpus_that_do_not_split_into_tp_groups_are_refused_saying_what_to_change():
    with pytest.raises(SpecError) as e:
        gpu_groups(parse_gpus("0,1,2"), 2)
    assert "3 GPUs (0,1,2) cannot be split into groups of tensor_parallel_size 2" in str(e.value)
    assert "--gpus 0,1" in str(e.value) and "tensor_parallel_size" in e.value.hint


def test_replicas_that_do_not_fit_the_gpus_are_refused_with_the_count_that_fits():
    with pytest.raises(SpecError) as e:
        gpu_groups(parse_gpus("0,1,2,3"), 2, replicas=3)
    assert "needs 6 GPUs" in str(e.value) and "--replicas 2" in e.value.hint


def test_no_gpu_at_all_is_refused():
    with pytest.raises(SpecError, match="empty"):
        parse_gpus(" , ")


# --------------------------------------------------------------------------- one GPU split


def test_a_gpu_listed_twice_is_split_each_replica_gets_half_the_memory():
    spec = apply_overrides(load_profile("qwen2.5-1.5b-smoke"), ["gpu_memory_utilization=0.9"])
    reps = plan_replicas(spec, gpus=parse_gpus("0,0"), base_port=9000)
    assert [(r.spec.gpus, r.spec.gpu_memory_utilization) for r in reps] == [
        ([0], 0.45),
        ([0], 0.45),
    ]
    assert check_fleet(reps) == []
    for r in reps:
        line = docker_run_command_line(r.spec)
        assert "--gpu-memory-utilization 0.45" in line and "device=0" in line
    # a mixed list: only the split GPU's replicas are divided
    mixed = plan_replicas(spec, gpus=parse_gpus("0,0,0,1"), base_port=9000)
    assert [r.spec.gpu_memory_utilization for r in mixed] == [0.3, 0.3, 0.3, 0.9]
    # whole TP groups may be repeated
    tp = plan_replicas(load_profile(TP2), gpus=parse_gpus("0,1,0,1"), base_port=9000)
    assert [r.spec.gpus for r in tp] == [[0, 1], [0, 1]]
    assert {r.spec.gpu_memory_utilization for r in tp} == {
        int(load_profile(TP2).gpu_memory_utilization / 2 * 1000) / 1000
    }


def test_replicas_splitting_a_gpu_start_one_after_the_other_others_in_parallel():
    spec = load_profile("qwen2.5-1.5b-smoke")
    reps = plan_replicas(spec, gpus=parse_gpus("0,0,1"), base_port=9000)
    assert [[r.index for r in g] for g in shared_gpu_groups(reps)] == [[0, 1], [2]]
    sims = plan_replicas(load_profile("sim"), gpus=parse_gpus("0,0"), base_port=9000)
    assert [[r.index for r in g] for g in shared_gpu_groups(sims)] == [[0], [1]]


def test_a_split_that_cannot_work_is_refused_saying_what_to_change():
    spec = apply_overrides(load_profile("qwen2.5-1.5b-smoke"), ["gpu_memory_utilization=0.09"])
    with pytest.raises(SpecError) as e:
        plan_replicas(spec, gpus=parse_gpus("0,0"))
    assert "split 2 ways is 0.045 per replica, below 0.05" in str(e.value)
    assert "gpu_memory_utilization=0.10" in e.value.hint
    with pytest.raises(SpecError, match="twice in one tensor-parallel group") as e:
        plan_replicas(load_profile(TP2), gpus=parse_gpus("0,0"))
    assert "--gpus 0,1,0,1" in e.value.hint
    with pytest.raises(SpecError, match="overlaps 1,2 without being the same group"):
        plan_replicas(load_profile(TP2), gpus=parse_gpus("0,1,1,2"))


def test_separate_entries_on_one_gpu_are_allowed_only_when_their_memory_fits(tmp_path):
    both = plan_replicas(load_profile("gemma4-e4b-mtp"), gpus=["0"], fleet="f")
    both += plan_replicas(
        load_profile("gemma4-e4b-mtp"), gpus=["0"], base_port=8100, fleet="f", first_index=1
    )
    with pytest.raises(SpecError, match=r"add up to 1\.800") as e:
        check_fleet(both)
    assert "gpus: 0,0" in e.value.hint
    half = apply_overrides(load_profile("gemma4-e4b-mtp"), ["gpu_memory_utilization=0.45"])
    ok = plan_replicas(half, gpus=["0"], fleet="f")
    ok += plan_replicas(half, gpus=["0"], base_port=8100, fleet="f", first_index=1)
    assert check_fleet(ok) == []


def test_up_sim_on_a_split_gpu_dry_run_shows_the_halved_memory():
    r = brain("up", "qwen2.5-1.5b-smoke", "--gpus", "0,0", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.output.count("--gpu-memory-utilization") == 2
    util = load_profile("qwen2.5-1.5b-smoke").gpu_memory_utilization
    assert r.output.count(f"--gpu-memory-utilization {int(util / 2 * 1000) / 1000}") == 2
    bad = runner.invoke(app, ["up", TP2, "--gpus", "0,0", "--dry-run"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_ports_are_the_base_plus_i_and_zero_asks_the_os_for_each():
    assert replica_ports(8000, 3) == [8000, 8001, 8002]
    offered = iter([41000, 41000, 41007, 41003])
    assert replica_ports(0, 3, pick_free=lambda: next(offered)) == [41000, 41007, 41003]
    with pytest.raises(SpecError, match="past 65535"):
        replica_ports(65534, 3)


def test_tp2_replicas_get_their_own_name_port_container_and_gpu_group():
    reps = plan_replicas(load_profile(TP2), gpus=parse_gpus("0,1,2,3"), base_port=9000)
    assert [(r.name, r.spec.port, r.spec.gpus) for r in reps] == [
        (f"{TP2}-r0", 9000, [0, 1]),
        (f"{TP2}-r1", 9001, [2, 3]),
    ]
    line = docker_run_command_line(reps[1].spec)
    assert f"--name marathon-{TP2}-r1 " in line
    assert "--gpus '\"device=2,3\"'" in line and "-p 127.0.0.1:9001:8000" in line
    assert "--tensor-parallel-size 2" in line and "--max-model-len 131072" in line
    proc = apply_overrides(reps[1].spec, ["backend=process"])
    assert process_environment(proc)["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_without_gpus_replicas_take_consecutive_devices_and_the_sim_takes_none():
    reps = plan_replicas(load_profile("gemma4-e4b-mtp"), replicas=3)
    assert [r.spec.gpus for r in reps] == [[0], [1], [2]]
    assert [r.spec.port for r in reps] == [8000, 8001, 8002]
    sims = plan_replicas(load_profile("sim"), replicas=3)
    assert [r.gpus for r in sims] == ["-", "-", "-"]
    recorded = plan_replicas(load_profile("sim"), gpus=parse_gpus("4,5,6"))
    assert [r.spec.gpus for r in recorded] == [[4], [5], [6]]


def test_a_fleet_never_gives_a_port_or_gpu_twice_and_warns_about_mixed_model_names():
    a = plan_replicas(load_profile("gemma4-e4b-mtp"), gpus=["0"], fleet="f")
    b = plan_replicas(load_profile("gemma4-e4b-mtp"), gpus=["0"], fleet="f", first_index=1)
    with pytest.raises(SpecError, match="port 8000 is given to both f-r0 and f-r1"):
        check_fleet(a + b)
    c = plan_replicas(
        load_profile("gemma4-e4b-mtp"), gpus=["0"], base_port=8100, fleet="f", first_index=1
    )
    with pytest.raises(SpecError, match="GPU 0 is given to both f-r0 and f-r1"):
        check_fleet(a + c)
    with pytest.raises(SpecError, match="two servers are named f-r0"):
        check_fleet(a + plan_replicas(load_profile("sim"), fleet="f"))
    d = plan_replicas(load_profile("qwen2.5-1.5b-smoke"), gpus=["1"], fleet="f", first_index=1)
    warnings = check_fleet(a + d)
    assert len(warnings) == 1 and "different model names" in warnings[0]


def test_preload_and_multi_node_servers_are_not_replicated():
    pre = apply_overrides(
        load_profile("gemma4-e4b-mtp"), ["preload.enabled=true", "preload.socket_dir=/tmp/wc"]
    )
    with pytest.raises(SpecError, match="weight-cache daemon serves one server"):
        plan_replicas(pre, replicas=2)
    with pytest.raises(SpecError, match="multi-node server is one replica"):
        plan_replicas(load_profile("qwen3-32b-2node-ray"), replicas=2)


def test_a_fleet_file_lists_servers_with_profile_gpus_port_and_overrides(tmp_path):
    f = tmp_path / "coding.yaml"
    f.write_text(
        "servers:\n"
        f"  - profile: {TP2}\n"
        "    gpus: 0,1,2,3\n"
        "    port: 8100\n"
        "  - profile: gemma4-e4b-mtp\n"
        "    gpus: 4\n"
        "    overrides: {max_model_len: 16384, docker.shm_size: 8g}\n"
    )
    name, reps = load_fleet_file(f)
    assert name == "coding"
    assert [(r.name, r.spec.port, r.gpus) for r in reps] == [
        ("coding-r0", 8100, "0,1"),
        ("coding-r1", 8101, "2,3"),
        ("coding-r2", 8102, "4"),
    ]
    assert reps[2].spec.max_model_len == 16384 and reps[2].spec.docker.shm_size == "8g"
    assert check_fleet(reps) == []


def test_fleet_file_mistakes_name_the_file_line_and_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: x\nservers:\n  - profile: sim\n    gpu: [0]\n")
    with pytest.raises(SpecError) as e:
        load_fleet_file(f)
    assert f"{f}:4: servers.0.gpu: unknown field" in str(e.value)
    f.write_text(f"servers:\n  - profile: sim\n  - profile: {TP2}\n    gpus: 0,1,2\n")
    with pytest.raises(SpecError) as e:
        load_fleet_file(f)
    assert f"{f}:3:" in str(e.value) and "cannot be split" in str(e.value)


def test_fleet_file_yaml_errors_name_the_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(
        "name: x\nservers:\n  - profile: sim\n  - profile: sim\n    port: 8100\n    port: 8101\n"
    )
    with pytest.raises(SpecError) as e:
        load_fleet_file(f)
    assert str(e.value).startswith(
        f'{f}:6: servers.1.port: duplicate key "port" (first given on line 5)'
    )
    f.write_text("name: x\nservers:\n  - profile: sim\n   gpus: 0\n")
    with pytest.raises(SpecError) as e:
        load_fleet_file(f)
    assert e.value.file == str(f) and e.value.line == 4
    assert "invalid YAML: bad indentation" in str(e.value) and "must line up" in str(e.value)


def test_a_replicas_spec_file_reads_back_as_written(tmp_path, monkeypatch):
    # Strings a YAML 1.1 writer leaves bare ("08", "1e5") must not come back as numbers.
    from brain.fleet.run import replica_spec_file

    monkeypatch.setenv("MARATHON_HOME", str(tmp_path))
    spec = apply_overrides(load_profile("sim"), ["tag=08", "served_model_name=1e5"])
    (replica,) = plan_replicas(spec, base_port=9000, fleet="f")
    path = replica_spec_file(replica)
    assert load_profile(path) == replica.spec
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_fleet_file_names_stay_text(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text("name: no\nservers:\n  - profile: sim\n")
    assert load_fleet_file(f)[0] == "no"


# --------------------------------------------------------------------------- CLI: dry runs


def test_dry_run_prints_every_replicas_command_and_starts_nothing():
    r = brain("up", TP2, "--gpus", "0,1,2,3", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "# fleet gemma4-e4b-mtp-tp2: 2 replica(s)" in r.output
    assert r.output.count("docker run -d") == 2
    assert "--gpus '\"device=0,1\"'" in r.output and "--gpus '\"device=2,3\"'" in r.output
    assert "-p 127.0.0.1:8000:8000" in r.output and "-p 127.0.0.1:8001:8000" in r.output
    r = brain("up", "sim", "--replicas", "3", "--port", "9100", "--dry-run")
    assert r.exit_code == 0, r.output
    for i, port in enumerate((9100, 9101, 9102)):
        assert f"replica {i}: sim-r{i}  GPUs -  port {port}" in r.output
        assert f"--port {port} " in r.output
    assert Registry().servers() == []


def test_a_mismatch_is_a_spec_error_not_a_traceback():
    r = runner.invoke(app, ["up", TP2, "--gpus", "0,1,2", "--dry-run"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "cannot be split into groups of tensor_parallel_size 2" in r.output
    r = runner.invoke(app, ["up", "--fleet", "x.yaml", "--replicas", "2"])
    assert r.exit_code == 2 and "--fleet takes every server setting from the file" in r.output


def test_a_fleet_file_dry_run(tmp_path):
    f = tmp_path / "pair.yaml"
    f.write_text("name: pair\nservers:\n  - {profile: sim, replicas: 2, port: 9200}\n")
    r = brain("up", "--fleet", str(f), "--dry-run")
    assert r.exit_code == 0, r.output
    assert "pair-r0" in r.output and "pair-r1" in r.output and "--port 9201" in r.output


# --------------------------------------------------------------------------- real sim replicas


def test_up_sim_replicas_start_answer_are_listed_found_and_stopped_together():
    base = free_port_block(3)
    ports = [base, base + 1, base + 2]
    r = brain("up", "sim", "--replicas", "3", "--port", str(base), "--set", "name=trio")
    assert r.exit_code == 0, r.output
    assert "ready fleet trio: 3 replica(s)" in r.output
    try:
        assert [health(p) for p in ports] == [200, 200, 200]
        records = fleet_records("trio")
        assert [(x.name, x.replica, x.handle["port"]) for x in records] == [
            ("trio-r0", 0, base),
            ("trio-r1", 1, base + 1),
            ("trio-r2", 2, base + 2),
        ]
        ps = brain("ps").output
        assert "fleet trio: 3/3 running" in ps
        assert all(f"trio-r{i}" in ps and str(p) in ps for i, p in enumerate(ports))
        st = brain("status", "trio")
        assert st.exit_code == 0, st.output
        assert st.output.count("running") == 3 and st.output.count(" ok ") == 3
        lines = brain("status", "trio", "--json").output.splitlines()
        assert [json.loads(ln) for ln in lines] == [
            {
                "server": f"trio-r{i}",
                "fleet": "trio",
                "replica": i,
                "gpus": json.loads(lines[i])["gpus"],
                "url": f"http://127.0.0.1:{p}/v1",
                "process": json.loads(lines[i])["process"],
                "alive": True,
                "health": "ok",
            }
            for i, p in enumerate(ports)
        ]
        assert fleet_endpoints("trio") == [f"http://127.0.0.1:{p}/v1" for p in ports]
        for x in records:  # each replica's real process runs with NVLink multicast off
            environ = Path(f"/proc/{x.handle['ref']}/environ").read_bytes().split(b"\0")
            assert b"NCCL_NVLS_ENABLE=0" in environ

        # a replica that died (unsupervised here) is no longer an endpoint
        os.kill(int(records[1].handle["ref"]), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while len(fleet_endpoints("trio")) != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fleet_endpoints("trio") == [f"http://127.0.0.1:{p}/v1" for p in (base, base + 2)]
        again = runner.invoke(app, ["up", "sim", "--replicas", "3", "--set", "name=trio"])
        assert again.exit_code == 1 and "fleet trio is already running" in again.output
    finally:
        r = brain("down", "trio")
    assert r.exit_code == 0, r.output
    assert "stopped fleet trio (3 replica(s))" in r.output
    assert Registry().servers() == [] and [health(p) for p in ports] == [None, None, None]
    with pytest.raises(FleetNotRunning) as e:
        fleet_endpoints("trio")
    assert isinstance(e.value, BrainError) and "brain up" in str(e.value)


def test_a_busy_port_in_the_range_refuses_the_whole_fleet_naming_the_replica():
    base = free_port_block(3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", base + 1))
        s.listen()
        r = runner.invoke(app, ["up", "sim", "--replicas", "3", "--port", str(base)])
    assert r.exit_code == 1, r.output
    assert "sim-r1" in r.output and "already in use" in r.output and "--port 0" in r.output
    assert Registry().servers() == []


def test_each_replica_has_its_own_supervisor_one_restarts_while_the_others_serve(marathon_home):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from brain.cli import app; app()",
            *("up", "sim", "--replicas", "3", "--port", "0", "--set", "name=wf"),
            *("--watch", "--poll-interval", "0.3"),
        ],
        env={**os.environ, "MARATHON_HOME": str(marathon_home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    events = ServerEventWriter(f"sqlite:///{marathon_home / 'marathon.db'}")

    def ready(name: str) -> bool:
        # /health answers before the supervisor has seen the whole of readiness; a kill in
        # between is a failed first start, which is reported rather than retried.
        return "ready" in [e.type for e in events.read(name)]

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            recs = fleet_records("wf")
            if len(recs) == 3 and all(
                x.supervisor_pid and ready(x.name) and health(x.handle["port"]) == 200 for x in recs
            ):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the fleet did not come up")
        assert len({x.supervisor_pid for x in recs}) == 3  # one supervisor process each
        assert proc.pid not in {x.supervisor_pid for x in recs}
        victim = recs[1]
        others = [recs[0].handle["port"], recs[2].handle["port"]]
        os.kill(int(victim.handle["ref"]), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert [health(p) for p in others] == [200, 200]  # never interrupted
            now = Registry().get("wf-r1")
            restarted = now is not None and now.handle["ref"] != victim.handle["ref"]
            if restarted and health(now.handle["port"]) == 200:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("wf-r1 was not restarted")
        assert now.handle["port"] == victim.handle["port"]  # same URL for the clients
        assert now.supervisor_pid == victim.supervisor_pid
        assert f"pid {victim.supervisor_pid}" in brain("ps").output
        assert len(fleet_endpoints("wf")) == 3
        r = brain("down", "wf")
        assert r.exit_code == 0, r.output
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        if fleet_records("wf"):  # a failed run: the replicas' supervisors outlive `brain up`
            brain("down", "wf")
    assert Registry().servers() == []
    types = [e.type for e in events.read("wf-r1")]
    assert types[:2] == ["starting", "ready"]
    assert "died" in types and "restarting" in types and types[-1] == "stopped"
    assert [e.type for e in events.read("wf-r0")] == ["starting", "ready", "stopped"]


def test_replicas_splitting_one_gpu_start_one_after_the_other_at_half_the_memory(monkeypatch):
    monkeypatch.setenv("MARATHON_VLLM_EXECUTABLE", f"{sys.executable} -m brain.sim.vllm_entry")
    base = free_port_block(2)
    r = brain("up", "sim", "--set", "backend=process", "--gpus", "0,0", "--port", str(base),
              "--set", "name=half", "--set", "gpu_memory_utilization=0.8")  # fmt: skip
    try:
        assert r.exit_code == 0, r.output
        shares = r.output.index("half-r1 shares GPU 0 with half-r0: starting it now")
        assert r.output.index("half-r0 ready") < shares < r.output.index("half-r1 ready")
        for rec in fleet_records("half"):
            pid = rec.handle["ref"]
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert argv[argv.index(b"--gpu-memory-utilization") + 1] == b"0.4"
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert b"CUDA_VISIBLE_DEVICES=0" in environ and b"NCCL_NVLS_ENABLE=0" in environ
    finally:
        assert brain("down", "half").exit_code == 0
