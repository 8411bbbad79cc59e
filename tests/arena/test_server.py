"""The stand-in Arena server itself, exercised with plain httpx."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .server import (
    DEVICE_AUTH_PATH,
    DEVICE_GRANT,
    LOGOUT_PATH,
    SUBMIT_PATH,
    TOKEN_PATH,
    ArenaServer,
)

KEY = "arena_pat_test_key"
CLI = "/api/cli/v1"
MANIFEST = {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1", "num_envs": 4}}


@pytest.fixture
def api(arena_server: ArenaServer) -> Iterator[httpx.Client]:
    """An httpx client authenticated with the default API key."""
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=arena_server.url, headers=headers, timeout=5) as client:
        yield client


def events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def submission(**overrides: Any) -> dict[str, Any]:
    body = {
        "manifest": MANIFEST,
        "resource_id": "arena-small",
        "num_nodes": 1,
        "project": "demo",
        "experiment_name": "run-1",
    }
    return body | overrides


def kc_form(**fields: str) -> dict[str, str]:
    return {"client_id": "arena-cli", **fields}


def decode_jwt(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


# --------------------------------------------------------------------------- authentication


def test_api_paths_need_a_valid_bearer_credential(arena_server: ArenaServer) -> None:
    url = f"{arena_server.url}{CLI}/projects"
    assert httpx.get(url).status_code == 401
    wrong = httpx.get(url, headers={"Authorization": "Bearer not-a-key-12345"})
    assert wrong.status_code == 401
    assert wrong.json() == {"detail": "Not authenticated"}
    assert "not-a-key-12345" not in wrong.text
    assert httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_unknown_paths_and_capabilities_answer_404(api: httpx.Client) -> None:
    assert api.get(f"{CLI}/capabilities").status_code == 404
    no_auth = httpx.get(f"{api.base_url}{CLI}/capabilities")
    assert no_auth.status_code == 404
    assert api.get(f"{CLI}/experiments/jobs/submit").status_code == 405


def test_device_flow_is_pending_then_issues_usable_tokens(arena_server: ArenaServer) -> None:
    with httpx.Client(base_url=arena_server.url) as kc:
        start = kc.post(DEVICE_AUTH_PATH, data=kc_form(scope="openid profile email")).json()
        assert start["interval"] == pytest.approx(0.05)
        assert start["user_code"] in start["verification_uri_complete"]
        poll = kc_form(grant_type=DEVICE_GRANT, device_code=start["device_code"])
        for _ in range(2):
            pending = kc.post(TOKEN_PATH, data=poll)
            assert (pending.status_code, pending.json()["error"]) == (400, "authorization_pending")
        tokens = kc.post(TOKEN_PATH, data=poll).json()
        assert tokens["token_type"] == "Bearer" and tokens["refresh_token"]
        assert decode_jwt(tokens["access_token"])["exp"] > time.time() + 200
        user = kc.get(
            "/api/users/current", headers={"Authorization": "Bearer " + tokens["access_token"]}
        )
        assert user.json()["email"] == "ada@example.com"  # not enveloped by default
        assert kc.post(TOKEN_PATH, data=poll).json()["error"] == "invalid_grant"  # used up


@pytest.mark.arena(auto_approve_after=None, slow_down_once=True)
def test_device_flow_manual_approval_slow_down_and_expiry(arena_server: ArenaServer) -> None:
    with httpx.Client(base_url=arena_server.url) as kc:
        code = kc.post(DEVICE_AUTH_PATH, data=kc_form()).json()
        poll = kc_form(grant_type=DEVICE_GRANT, device_code=code["device_code"])
        assert kc.post(TOKEN_PATH, data=poll).json()["error"] == "slow_down"
        assert kc.post(TOKEN_PATH, data=poll).json()["error"] == "authorization_pending"
        assert arena_server.approve_device(code["user_code"]) == 1
        assert kc.post(TOKEN_PATH, data=poll).status_code == 200

        other = kc.post(DEVICE_AUTH_PATH, data=kc_form()).json()
        arena_server.expire_device_codes()
        expired = kc_form(grant_type=DEVICE_GRANT, device_code=other["device_code"])
        assert kc.post(TOKEN_PATH, data=expired).json()["error"] == "expired_token"
        assert kc.post(TOKEN_PATH, data={"client_id": "other"}).status_code == 401
        assert kc.post(TOKEN_PATH.replace("arena", "nope"), data=kc_form()).status_code == 404


def test_refresh_logout_and_revocation(arena_server: ArenaServer) -> None:
    first = arena_server.issue_tokens()
    with httpx.Client(base_url=arena_server.url) as kc:
        refresh = kc_form(grant_type="refresh_token", refresh_token=first["refresh_token"])
        second = kc.post(TOKEN_PATH, data=refresh).json()
        assert second["access_token"] != first["access_token"]
        arena_server.revoke_refresh_tokens()
        rejected = kc.post(TOKEN_PATH, data=refresh)
        assert (rejected.status_code, rejected.json()["error"]) == (400, "invalid_grant")

        third = arena_server.issue_tokens()
        logout = kc.post(LOGOUT_PATH, data=kc_form(refresh_token=third["refresh_token"]))
        assert logout.status_code == 204
        again = kc_form(grant_type="refresh_token", refresh_token=third["refresh_token"])
        assert kc.post(TOKEN_PATH, data=again).json()["error"] == "invalid_grant"


def test_expired_and_short_lived_access_tokens(arena_server: ArenaServer) -> None:
    url = f"{arena_server.url}/api/users/credits"
    short = arena_server.issue_tokens(ttl=30)["access_token"]
    assert decode_jwt(short)["exp"] < time.time() + 60
    assert httpx.get(url, headers={"Authorization": f"Bearer {short}"}).status_code == 200
    arena_server.expire_access_tokens()
    assert httpx.get(url, headers={"Authorization": f"Bearer {short}"}).status_code == 401
    gone = arena_server.issue_tokens(ttl=-1)["access_token"]
    assert httpx.get(url, headers={"Authorization": f"Bearer {gone}"}).status_code == 401


# --------------------------------------------------------------------------- JSON endpoints


def test_envelope_can_be_switched_off(arena_server: ArenaServer, api: httpx.Client) -> None:
    wrapped = api.get(f"{CLI}/projects").json()
    assert wrapped == {
        "ok": True,
        "data": [{"name": "demo", "type": "Classic RL", "description": "Demo"}],
    }
    arena_server.settings.envelope = False
    assert api.get(f"{CLI}/projects").json() == wrapped["data"]
    assert api.get("/api/users/credits").json() == {"credits": 1000.0}


def test_projects_create_list_delete(arena_server: ArenaServer, api: httpx.Client) -> None:
    create = {"name": "llm", "description": None, "llm_based": True}
    assert api.post(f"{CLI}/projects/create", json=create).status_code == 200
    assert api.post(f"{CLI}/projects/create", json=create).status_code == 409
    names = [p["name"] for p in api.get(f"{CLI}/projects").json()["data"]]
    assert names == ["demo", "llm"]
    assert arena_server.find_project("llm") == {"name": "llm", "type": "LLM", "description": ""}
    assert api.request("DELETE", f"{CLI}/projects/delete", json={"name": "llm"}).status_code == 200
    missing = api.request("DELETE", f"{CLI}/projects/delete", json={"name": "llm"})
    assert (missing.status_code, missing.json()) == (404, {"message": "Project 'llm' not found"})


def test_resources_user_and_credits(api: httpx.Client) -> None:
    tiers = api.get(f"{CLI}/resources/list").json()["data"]["tiers"]
    assert tiers["arena-small"]["gpu_type"] is None
    assert {"name", "num_gpus", "gpu_type", "num_cpus", "ram_gb", "price_per_node_hour"} <= set(
        tiers["arena-large"]
    )
    assert api.get("/api/users/current").json()["first_name"] == "Ada"


def test_experiment_lifecycle_endpoints(arena_server: ArenaServer, api: httpx.Client) -> None:
    assert api.get(f"{CLI}/experiments/list").status_code == 400
    assert api.get(f"{CLI}/experiments/list", params={"project": "nope"}).status_code == 404
    listed = api.get(f"{CLI}/experiments/list", params={"project": "demo"}).json()["data"]
    assert [e["name"] for e in listed] == ["cartpole-dqn", "lunar-ppo"]

    stop = api.post(f"{CLI}/experiments/jobs/stop", json={"experiment_name": "lunar-ppo"})
    assert (stop.headers["content-type"].split(";")[0], stop.text) == ("text/plain", "Ok")
    assert arena_server.find_experiment("lunar-ppo").status == "stopped"
    resume = {"experiment_name": "lunar-ppo", "max_steps": 5000}
    assert (
        api.post(f"{CLI}/experiments/jobs/resume", json=resume).json()["data"]["max_steps"] == 5000
    )
    assert api.post(f"{CLI}/experiments/jobs/resume", json=resume).status_code == 409

    params = {"experiment_name": "cartpole-dqn"}
    checkpoints = api.get(f"{CLI}/experiments/jobs/checkpoints", params=params).json()["data"]
    assert set(checkpoints[0]) == {"steps", "size_mb", "evaluation_score", "training_score"}
    missing = api.get(f"{CLI}/experiments/jobs/checkpoints", params={"experiment_name": "x"})
    assert missing.status_code == 404


def test_metrics_csv_preview_and_column_selection(api: httpx.Client) -> None:
    url = f"{CLI}/experiments/metrics"
    preview = api.get(url, params={"experiment_name": "cartpole-dqn", "preview_rows": 3})
    assert preview.headers["content-type"].startswith("text/csv")
    assert (
        preview.headers["content-disposition"] == 'attachment; filename="cartpole-dqn_metrics.csv"'
    )
    lines = preview.text.splitlines()
    assert lines[0] == "step,fitness,score,loss" and len(lines) == 4

    params = [("experiment_name", "cartpole-dqn"), ("preview_rows", "2")]
    picked = api.get(url, params=[*params, ("metric", "loss"), ("metric", "score")])
    assert picked.text.splitlines()[0] == "step,loss,score"
    assert api.get(url, params=[*params, ("metric", "bogus")]).status_code == 404

    names = api.get(url, params={"experiment_name": "cartpole-dqn"}).json()["data"]
    assert names == ["fitness", "loss", "score"]
    details = api.get(url, params={"experiment_name": "cartpole-dqn", "details": "true"})
    assert details.json()["data"] == {"experiment_id": 1, "metrics": names}


# --------------------------------------------------------------------------- streams


def test_submit_streams_ndjson_and_creates_one_experiment(
    arena_server: ArenaServer, api: httpx.Client
) -> None:
    before = len(arena_server.experiments)
    with api.stream("POST", SUBMIT_PATH, json=submission()) as response:
        assert response.headers["content-type"] == "application/x-ndjson"
        assert response.headers["transfer-encoding"] == "chunked"
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert lines[0]["status"] == "started"
    assert {e["status"] for e in lines[1:-1]} == {"running"}
    final = lines[-1]
    assert (final["kind"], final["stage"], final["status"]) == ("status", "submission", "completed")
    assert final["detail"] == {"accepted": True, "experiment_id": 3, "experiment_name": "run-1"}
    assert len(arena_server.experiments) == before + 1
    assert arena_server.count("POST", SUBMIT_PATH) == 1
    assert arena_server.requests[-1].json["manifest"] == MANIFEST

    unnamed = events(api.post(SUBMIT_PATH, json=submission(experiment_name=None, resource_id=None)))
    assert unnamed[-1]["detail"]["experiment_name"] == "exp-4"
    assert arena_server.find_experiment("exp-4").resource_id == "arena-medium"


def test_submit_multipart_form(arena_server: ArenaServer, api: httpx.Client) -> None:
    fields = {"manifest": json.dumps(MANIFEST), "project": "demo", "num_nodes": "2"}
    files = {"reward_file": ("reward.py", b"def reward(q, a, c): return 1.0\n", "text/x-python")}
    final = events(api.post(SUBMIT_PATH, data=fields, files=files))[-1]
    assert final["status"] == "completed"
    assert arena_server.experiments[-1].num_nodes == 2
    assert arena_server.requests[-1].files["reward_file"].data.startswith(b"def reward")


def test_submit_rejections(arena_server: ArenaServer, api: httpx.Client) -> None:
    project = api.post(SUBMIT_PATH, json=submission(project="ghost"))
    assert (project.status_code, project.json()["message"]) == (404, "Project 'ghost' not found")
    bad_env = {"algorithm": {"name": "DQN"}, "environment": {"name": "Foo-v0"}}
    env = api.post(SUBMIT_PATH, json=submission(manifest=bad_env))
    assert env.status_code == 404 and "Environment Foo-v0 not found" in env.json()["message"]
    assert api.post(SUBMIT_PATH, json=submission(resource_id="arena-huge")).status_code == 422
    assert api.post(SUBMIT_PATH, json={"manifest": "nope"}).status_code == 422
    arena_server.state.credits = 0
    assert api.post(SUBMIT_PATH, json=submission()).status_code == 402
    assert len(arena_server.experiments) == 2

    arena_server.settings.errors_in_stream = True
    failed = events(api.post(SUBMIT_PATH, json=submission(manifest=bad_env)))
    assert (failed[-1]["status"], failed[-1]["level"]) == ("failed", "error")
    assert "Environment Foo-v0 not found" in failed[-1]["message"]


def test_idempotency_key_dedupes_submissions(arena_server: ArenaServer, api: httpx.Client) -> None:
    headers = {"Idempotency-Key": "key-1"}
    first = events(api.post(SUBMIT_PATH, json=submission(), headers=headers))
    second = events(api.post(SUBMIT_PATH, json=submission(), headers=headers))
    assert second[-1] == first[-1]
    assert [e.name for e in arena_server.experiments].count("run-1") == 1
    changed = api.post(SUBMIT_PATH, json=submission(num_nodes=3), headers=headers)
    assert changed.status_code == 409


def make_archive(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_create_and_validate_records_multipart_parts(
    arena_server: ArenaServer, api: httpx.Client
) -> None:
    source = "import gymnasium as gym\n\nclass Maze(gym.Env):\n    pass\n"
    archive = make_archive({"maze/env.py": source, "requirements.txt": "numpy\n"})
    files = {
        "file": ("maze.tar.gz", archive, "application/gzip"),
        "env_config": ("env_config.yaml", b"size: 5\n", "application/x-yaml"),
        "requirements": ("requirements.txt", b"numpy\n", "text/plain"),
    }
    data = {"name": "Maze", "version": "v1", "multi_agent": "false", "do_rollouts": "true"}
    response = api.post(f"{CLI}/environments/create-and-validate", data=data, files=files)
    stream = events(response)
    assert [e["detail"]["check"] for e in stream if e["kind"] == "check"][-1] == "rollouts"
    assert stream[-1]["detail"]["env_info"]["entrypoint"] == "maze.env:Maze"

    sent = arena_server.requests[-1]
    assert sent.files["file"].data == archive
    assert sent.files["file"].content_type == "application/gzip"
    assert sent.files["env_config"].data == b"size: 5\n"
    assert sent.form == data
    catalogue = api.get(f"{CLI}/environments", params={"name": "Maze", "include_arena": "false"})
    assert catalogue.json()["data"] == {"Maze": {"v1": {"validated": True, "profiled": True}}}


def test_ambiguous_and_unreadable_sources_fail_in_stream(api: httpx.Client) -> None:
    source = "class A(Env):\n    pass\n\nclass B(ParallelEnv):\n    pass\n"
    url = f"{CLI}/environments/create-and-validate"
    file = ("env.tar.gz", make_archive({"two.py": source}), "application/gzip")
    ambiguous = events(api.post(url, data={"name": "Two"}, files={"file": file}))[-1]
    assert ambiguous["detail"]["error_code"] == "AMBIGUOUS_ENTRYPOINT"
    assert ambiguous["detail"]["available_entrypoints"] == ["two:A", "two:B"]
    junk = events(api.post(url, data={"name": "Junk"}, files={"file": ("x.tar.gz", b"junk")}))
    assert junk[-1]["status"] == "failed"


def test_environment_operations(api: httpx.Client) -> None:
    listed = api.get(f"{CLI}/environments", params={"name": "", "include_arena": "true"})
    assert {"GridWorld", "CartPole-v1"} <= set(listed.json()["data"])
    exists = api.get(f"{CLI}/environments/exists", params={"name": "GridWorld", "version": ""})
    assert exists.json()["data"] == {"exists": True}
    entry = api.get(f"{CLI}/environments/entrypoints", params={"name": "GridWorld", "version": ""})
    assert entry.json()["data"] == ["gridworld.env:GridWorldEnv"]

    validate = {"name": "GridWorld", "version": None, "do_rollouts": False}
    assert (
        events(api.post(f"{CLI}/environments/validate", json=validate))[-1]["status"] == "completed"
    )
    profile = events(
        api.post(f"{CLI}/environments/profile", json={"name": "GridWorld", "version": None})
    )
    assert profile[-1]["detail"]["steps_per_second"] > 0
    missing = api.post(f"{CLI}/environments/profile", json={"name": "Nope", "version": None})
    assert missing.status_code == 404

    dup = {"name": "GridWorld", "new_version_name": "v2", "version": None}
    assert (
        api.post(f"{CLI}/environments/duplicate", json=dup).json()["data"]["source_version"] == "v1"
    )
    delete = api.request(
        "DELETE", f"{CLI}/environments/delete", json={"name": "GridWorld", "version": "v1"}
    )
    assert delete.status_code == 200
    after = api.get(f"{CLI}/environments", params={"name": "GridWorld"}).json()["data"]
    assert after == {"GridWorld": {"v2": {"validated": True, "profiled": True}}}


# --------------------------------------------------------------------------- faults


def test_status_fault_is_consumed_then_normal_service(
    arena_server: ArenaServer, api: httpx.Client
) -> None:
    arena_server.inject("status", path=f"{CLI}/projects", status=503, times=2)
    assert [api.get(f"{CLI}/projects").status_code for _ in range(3)] == [503, 503, 200]
    assert arena_server.faults == []


def test_429_carries_retry_after(arena_server: ArenaServer, api: httpx.Client) -> None:
    arena_server.inject("429", method="GET", retry_after=2)
    assert (
        api.post(f"{CLI}/projects/create", json={"name": "x"}).status_code == 200
    )  # POST unmatched
    limited = api.get(f"{CLI}/projects")
    assert (limited.status_code, limited.headers["retry-after"]) == (429, "2")


def test_drop_before_processing_creates_nothing(
    arena_server: ArenaServer, api: httpx.Client
) -> None:
    arena_server.inject("drop", path=SUBMIT_PATH)
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        api.post(SUBMIT_PATH, json=submission())
    assert arena_server.count("POST", SUBMIT_PATH) == 1
    assert arena_server.find_experiment("run-1") is None


def test_drop_after_processing_then_idempotent_retry(
    arena_server: ArenaServer, api: httpx.Client
) -> None:
    arena_server.inject("drop", path=SUBMIT_PATH, after_processing=True)
    headers = {"Idempotency-Key": "retry-me"}
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        api.post(SUBMIT_PATH, json=submission(), headers=headers)
    assert arena_server.find_experiment("run-1") is not None
    retried = events(api.post(SUBMIT_PATH, json=submission(), headers=headers))
    assert retried[-1]["detail"]["experiment_name"] == "run-1"
    assert [e.name for e in arena_server.experiments].count("run-1") == 1


def test_delay_triggers_a_client_timeout(arena_server: ArenaServer, api: httpx.Client) -> None:
    arena_server.inject("delay", seconds=0.5)
    with pytest.raises(httpx.ReadTimeout):
        api.get(f"{CLI}/projects", timeout=0.1)
    assert api.get(f"{CLI}/projects").status_code == 200


def test_truncated_stream_stops_mid_way(arena_server: ArenaServer, api: httpx.Client) -> None:
    arena_server.inject("truncate_stream", path=SUBMIT_PATH, after_lines=2)
    received = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        api.stream("POST", SUBMIT_PATH, json=submission()) as r,
    ):
        received.extend(json.loads(line) for line in r.iter_lines() if line)
    assert [e["status"] for e in received] == ["started", "running"]
    assert arena_server.find_experiment("run-1") is not None  # the work was done server-side


def test_inject_rejects_unknown_kinds(arena_server: ArenaServer) -> None:
    with pytest.raises(ValueError, match="Unknown fault"):
        arena_server.inject("explode")


def test_status_after_processing_hides_a_done_submission(
    arena_server: ArenaServer, api: httpx.Client
) -> None:
    arena_server.inject("status", path=SUBMIT_PATH, status=502, after_processing=True)
    assert api.post(SUBMIT_PATH, json=submission()).status_code == 502
    assert arena_server.find_experiment("run-1") is not None


def test_stream_lines_arrive_one_by_one(arena_server: ArenaServer, api: httpx.Client) -> None:
    arena_server.settings.stream_delay = 0.1
    arrivals = []
    with api.stream("POST", SUBMIT_PATH, json=submission()) as response:
        for line in response.iter_lines():
            if line:
                arrivals.append(time.monotonic())
    assert len(arrivals) == 5
    assert arrivals[-1] - arrivals[0] >= 0.3  # written and flushed per line, not all at once
