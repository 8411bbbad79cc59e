"""Arena through the CLI and ArenaTrainer, against the stand-in server."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest
import yaml

from agile_arena import ArenaTrainer

from ..conftest import CONFIGS, ROOT

KEY = "arena_pat_test_key"
DQN = next(path for path in CONFIGS if path.parts[-2:] == ("dqn", "cartpole.yaml"))
API = "/api/"


def _api_requests(server) -> list:
    return [r for r in server.requests if r.path.startswith(API)]


@pytest.fixture
def keyed(arena_env, monkeypatch):
    """The stand-in, with ARENA_API_KEY set."""
    monkeypatch.setenv("ARENA_API_KEY", KEY)
    return arena_env


def test_help_never_calls_the_network(run, arena_env) -> None:
    assert run("--help").exit_code == 0
    assert run("arena", "--help").exit_code == 0
    assert run("train", "--help").exit_code == 0
    assert arena_env.requests == []


def test_device_login_shows_url_and_code_and_stores_private_tokens(run, arena_env) -> None:
    result = run("login")
    assert result.exit_code == 0, result.output
    # The reference prints only the URL; the code must be shown on its own too.
    code = re.search(r"code[^A-F0-9]*([0-9A-F]{4}-[0-9A-F]{4})", result.output)
    assert code is not None, result.output
    assert f"{arena_env.url}/" in result.output
    folder = Path.home() / ".arena"
    credentials = folder / "credentials.json"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    tokens = json.loads(credentials.read_text())
    assert tokens["access_token"] not in result.output
    assert tokens["refresh_token"] not in result.output
    profile = run("arena", "user", "profile")
    assert profile.exit_code == 0 and "email:" in profile.output
    assert run("logout").exit_code == 0
    assert not credentials.exists()


def test_submit_list_metrics_stop_through_the_cli(run, keyed, tmp_path) -> None:
    assert run("arena", "projects", "create", "my-project", "--description", "x").exit_code == 0
    assert run("arena", "projects", "set-default", "my-project").exit_code == 0
    assert run("arena", "projects", "get-default").output.strip() == "my-project"
    submitted = run(
        "train",
        str(DQN),
        "--backend",
        "arena",
        "--resource-id",
        "arena-large",
        "--num-nodes",
        "3",
        "--experiment-name",
        "cp-dqn",
    )
    assert submitted.exit_code == 0, submitted.output
    assert "submitted experiment 'cp-dqn' to project 'my-project'" in submitted.output
    assert "agile arena experiments list --project my-project" in submitted.output
    (request,) = keyed.requests_to("POST", "/api/cli/v1/experiments/jobs/submit")
    body = request.json
    assert (body["resource_id"], body["num_nodes"], body["project"]) == (
        "arena-large",
        3,
        "my-project",
    )
    assert body["manifest"]["algorithm"]["name"] == "DQN"
    assert body["manifest"]["environment"] == {"name": "CartPole-v1", "num_envs": 8}
    assert body["manifest"]["tournament_selection"]["tournament_size"] == 2
    listing = json.loads(run("arena", "experiments", "list", "--json").output)
    assert [row["name"] for row in listing].count("cp-dqn") == 1
    assert run("arena", "experiments", "stop", "cp-dqn").exit_code == 0
    resumed = run("arena", "experiments", "resume", "cp-dqn", "--max-steps", "2000000")
    assert resumed.exit_code == 0, resumed.output


def test_environment_version_is_sent_and_picks_that_version(run, keyed, tmp_path) -> None:
    from .server import EnvironmentVersion

    keyed.state.environments["merge-env"] = {"v1": EnvironmentVersion()}
    assert run("arena", "projects", "create", "p", "--description", "x").exit_code == 0
    manifest = tmp_path / "merge.yaml"
    environment = "environment: {name: merge-env, num_envs: 4, version: %s}\n"
    manifest.write_text("algorithm: {name: PPO}\n" + environment % "v1")
    submitted = run("train", str(manifest), "--backend", "arena", "--project", "p")
    assert submitted.exit_code == 0, submitted.output
    assert "environment.version: only Arena reads it" in submitted.output  # said, and sent
    (request,) = keyed.requests_to("POST", "/api/cli/v1/experiments/jobs/submit")
    sent = {"name": "merge-env", "num_envs": 4, "version": "v1"}
    assert request.json["manifest"]["environment"] == sent
    manifest.write_text("algorithm: {name: PPO}\n" + environment % "v2")  # not registered
    refused = run("train", str(manifest), "--backend", "arena", "--project", "p")
    assert refused.exit_code != 0 and "merge-env not found" in refused.output


def test_metrics_checkpoints_resources_environments_credits(run, keyed, tmp_path) -> None:
    target = tmp_path / "m.csv"
    metrics = run(
        "arena",
        "experiments",
        "metrics",
        "cartpole-dqn",
        "--project",
        "demo",
        "--output-file",
        str(target),
        "--preview-rows",
        "3",
        "--metric",
        "fitness",
    )
    assert metrics.exit_code == 0, metrics.output
    assert target.read_text().splitlines()[0].split(",")[:2] == ["step", "fitness"]
    assert "first 3 rows:" in metrics.output
    again = run(
        "arena",
        "experiments",
        "metrics",
        "cartpole-dqn",
        "--project",
        "demo",
        "--output-file",
        str(target),
    )
    assert again.exit_code == 1 and "Traceback" not in again.output  # no silent overwrite
    checkpoints = json.loads(
        run("arena", "experiments", "checkpoints", "cartpole-dqn", "--json").output
    )
    assert checkpoints and "steps" in checkpoints[0]
    resources = run("arena", "resources", "list")
    assert "CREDITS/NODE-HOUR" in resources.output and "arena-medium" in resources.output
    catalogue = json.loads(run("arena", "environments", "list", "--include-arena", "--json").output)
    assert "CartPole-v1" in catalogue
    assert run("arena", "user", "credits").exit_code == 0
    assert run("arena", "projects", "list", "--json").exit_code == 0


def _no_request_sent(server) -> None:
    assert _api_requests(server) == []


def test_ineligible_algorithm_fails_before_any_request(run, keyed, write) -> None:
    manifest = write("r.yaml", "algorithm: {name: REINFORCE}\nenvironment: {name: CartPole-v1}\n")
    result = run("train", str(manifest), "--backend", "arena", "--project", "demo")
    if "REINFORCE" not in result.output:
        pytest.skip("the agile-reinforce example plugin is not installed")
    assert result.exit_code == 2
    assert "algorithm.name: REINFORCE cannot run on Arena (train it with --backend local)" in (
        result.output
    )
    _no_request_sent(keyed)


def test_a_recipe_fails_before_any_request(run, keyed, write) -> None:
    data = yaml.safe_load(DQN.read_text())
    for section in ("mutation", "tournament_selection"):
        data.pop(section, None)
    data["training"]["pop_size"] = 1
    data["recipe"] = {"schedule": [{"generation": 1, "hyperparameters": {"lr": 1e-3}}]}
    manifest = write("recipe.yaml", yaml.safe_dump(data))
    result = run("train", str(manifest), "--backend", "arena", "--project", "demo")
    assert result.exit_code == 2, result.output
    assert "recipe: Arena does not replay recipes" in result.output
    _no_request_sent(keyed)


def test_multi_frequency_selection_fails_before_any_request(run, keyed, write) -> None:
    data = yaml.safe_load(DQN.read_text())
    data.pop("tournament_selection", None)
    data["training"]["pop_size"] = 6
    data["selection_strategy"] = {"strategy": "multi_frequency"}
    manifest = write("mf.yaml", yaml.safe_dump(data))
    result = run("train", str(manifest), "--backend", "arena", "--project", "demo")
    assert result.exit_code == 2, result.output
    assert "selection_strategy.strategy: Arena trains with tournament selection only" in (
        result.output
    )
    _no_request_sent(keyed)


def test_unknown_key_fails_before_any_request(run, keyed, write) -> None:
    manifest = write("u.yaml", DQN.read_text().replace("  num_envs: 8", "  num_env: 8"))
    result = run("train", str(manifest), "--backend", "arena", "--project", "demo")
    assert result.exit_code == 2
    assert "environment.num_env: unknown field (did you mean 'num_envs'?)" in result.output
    _no_request_sent(keyed)


def test_missing_project_fails_before_any_request(run, keyed) -> None:
    result = run("train", str(DQN), "--backend", "arena")
    assert result.exit_code == 2
    assert "--project" in result.output and "set-default" in result.output
    _no_request_sent(keyed)


def test_no_credentials_tells_the_user_to_log_in(run, arena_env) -> None:
    result = run("train", str(DQN), "--backend", "arena", "--project", "demo")
    assert result.exit_code == 1
    assert "agile login" in result.output
    _no_request_sent(arena_env)


def test_option_of_another_backend_is_refused(run, keyed) -> None:
    result = run("train", str(DQN), "--resource-id", "arena-medium")
    assert result.exit_code == 2
    assert "--resource-id is not an option of backend 'local'" in result.output


def test_transient_failures_are_retried_and_submitted_exactly_once(run, keyed) -> None:
    submit = "/api/cli/v1/experiments/jobs/submit"
    keyed.inject("status", path="/api/cli/v1/experiments/list", status=503)
    keyed.inject("429", path=submit, retry_after=0)
    keyed.inject("drop", path=submit, after_processing=True)
    result = run(
        "train", str(DQN), "--backend", "arena", "--project", "demo", "--experiment-name", "flaky"
    )
    assert result.exit_code == 0, result.output
    assert [e.name for e in keyed.state.experiments].count("flaky") == 1
    assert keyed.count("POST", submit) >= 2
    keys = {r.headers.get("idempotency-key") for r in keyed.requests_to("POST", submit)}
    assert len(keys) == 1 and None not in keys


def test_expired_token_refreshes_and_revoked_one_asks_to_log_in(run, arena_env) -> None:
    assert run("login").exit_code == 0
    arena_env.expire_access_tokens()
    assert run("arena", "projects", "list").exit_code == 0  # refreshed behind the scenes
    arena_env.expire_access_tokens()
    arena_env.revoke_refresh_tokens()
    result = run("arena", "projects", "list")
    assert result.exit_code == 1
    assert "agile login" in result.output and "Traceback" not in result.output


def test_a_bad_key_is_never_printed(run, arena_env) -> None:
    secret = "arena_pat_not_valid_123"
    result = run("arena", "--api-key", secret, "projects", "list")
    assert result.exit_code == 1
    assert secret not in result.output
    assert "API key" in result.output


def test_base_url_and_timeouts_are_flags(run, keyed, monkeypatch) -> None:
    url = keyed.url
    monkeypatch.setenv("ARENA_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    assert run("arena", "--base-url", url, "projects", "list").exit_code == 0
    keyed.inject("delay", path="/api/cli/v1/projects", seconds=2, times=10)
    slow = run("arena", "--base-url", url, "--request-timeout", "0.2", "projects", "list")
    assert slow.exit_code == 1 and "Traceback" not in slow.output
    submit = run(
        "train",
        str(DQN),
        "--backend",
        "arena",
        "--base-url",
        url,
        "--project",
        "demo",
        "--request-timeout",
        "5",
        "--upload-timeout",
        "20",
    )
    assert submit.exit_code == 0, submit.output


def test_custom_environment_is_uploaded_first(run, keyed, write) -> None:
    envs = ROOT / "tests" / "envs"
    manifest = write(
        "c.yaml",
        "algorithm: {name: PPO}\nenvironment: {name: DictReach, "
        f"entrypoint: 'toy.py:DictReach', path: '{envs}'}}\n",
    )
    refused = run("train", str(manifest), "--backend", "arena", "--project", "demo")
    assert refused.exit_code == 2 and "--upload-env" in refused.output
    _no_request_sent(keyed)
    result = run(
        "train",
        str(manifest),
        "--backend",
        "arena",
        "--project",
        "demo",
        "--upload-env",
        "--experiment-name",
        "custom",
    )
    assert result.exit_code == 0, result.output
    (upload,) = keyed.requests_to("POST", "/api/cli/v1/environments/create-and-validate")
    assert upload.form["name"] == "DictReach"
    assert upload.form["entrypoint"] == "toy:DictReach"
    assert upload.files["file"].filename.endswith(".tar.gz")
    assert keyed.count("POST", "/api/cli/v1/experiments/jobs/submit") == 1


def test_environment_upload_and_validate_commands(run, keyed) -> None:
    source = ROOT / "tests" / "envs"
    uploaded = run(
        "arena",
        "environments",
        "upload",
        "Reach",
        "--source",
        str(source),
        "--entrypoint",
        "toy:DictReach",
    )
    assert uploaded.exit_code == 0, uploaded.output
    assert run("arena", "environments", "validate", "Reach").exit_code == 0


def test_arena_trainer_returns_the_same_run_handle(keyed) -> None:
    trainer = ArenaTrainer.from_manifest(DQN)
    result = trainer.train(
        resource_id="arena-medium",
        num_nodes=2,
        project="demo",
        experiment_name="from-python",
        verbose=False,
    )
    assert (result.name, result.status) == ("from-python", "submitted")
    assert result.metrics == "agile arena experiments metrics from-python"
    assert result.summary["project"] == "demo"


def test_arena_trainer_follows_its_run_with_the_client(keyed, tmp_path) -> None:
    trainer = ArenaTrainer.from_manifest(DQN)
    trainer.train(project="demo", experiment_name="py-run", verbose=False)
    assert "py-run" in [row["name"] for row in trainer.list_experiments("demo")]
    with trainer.client() as client:
        names = client.list_metric_names("cartpole-dqn", project="demo")
        assert "fitness" in names
        client.stop_experiment("py-run")
    assert isinstance(trainer.list_checkpoints("cartpole-dqn"), list)
    assert trainer.resume_from_checkpoint("py-run", 5_000) is not None


def test_remaining_flags_reach_the_server(run, keyed, tmp_path) -> None:
    assert run("arena", "projects", "create", "llm", "--llm-based").exit_code == 0
    (create,) = keyed.requests_to("POST", "/api/cli/v1/projects/create")
    assert create.json["llm_based"] is True
    assert run("arena", "experiments", "list", "--project", "demo").exit_code == 0
    assert keyed.requests_to("GET", "/api/cli/v1/experiments/list")[-1].query["project"] == "demo"
    assert json.loads(run("arena", "resources", "list", "--json").output)
    assert run("arena", "environments", "list", "--name", "GridWorld").exit_code == 0
    assert keyed.requests_to("GET", "/api/cli/v1/environments")[-1].query["name"] == "GridWorld"
    validated = run(
        "arena", "environments", "validate", "GridWorld", "--version", "v1", "--do-rollouts"
    )
    assert validated.exit_code == 0, validated.output
    body = keyed.requests_to("POST", "/api/cli/v1/environments/validate")[-1].json
    assert (body["version"], body["do_rollouts"]) == ("v1", True)
    config = tmp_path / "env_config.json"
    config.write_text('{"length": 4}')
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy\n")
    uploaded = run(
        "arena",
        "environments",
        "upload",
        "Reach2",
        "--source",
        str(ROOT / "tests" / "envs"),
        "--entrypoint",
        "toy:DictReach",
        "--version",
        "v2",
        "--env-config",
        str(config),
        "--requirements",
        str(requirements),
        "--description",
        "toy",
        "--multi-agent",
        "--do-rollouts",
    )
    assert uploaded.exit_code == 0, uploaded.output
    upload = keyed.requests_to("POST", "/api/cli/v1/environments/create-and-validate")[-1]
    assert upload.form["version"] == "v2" and upload.form["description"] == "toy"
    assert upload.form["multi_agent"] == "true" and upload.form["do_rollouts"] == "true"
    assert upload.files["env_config"].data == b'{"length": 4}'
    assert upload.files["requirements"].data == b"numpy\n"


def test_login_force_and_timeout(run, arena_env) -> None:
    assert run("login").exit_code == 0
    polls = arena_env.count("POST", "/realms/arena/protocol/openid-connect/token")
    assert run("login").exit_code == 0  # valid tokens: no new device flow
    assert arena_env.count("POST", "/realms/arena/protocol/openid-connect/token") == polls
    assert run("login", "--force").exit_code == 0
    assert arena_env.count("POST", "/realms/arena/protocol/openid-connect/auth/device") == 2
    arena_env.settings.auto_approve_after = None  # nobody approves this time
    timed_out = run("login", "--force", "--timeout", "0.3")
    assert timed_out.exit_code == 1 and "Traceback" not in timed_out.output
