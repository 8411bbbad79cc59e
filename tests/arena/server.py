"""A stand-in Arena server: a real HTTP server on 127.0.0.1 that speaks the Arena API.

It follows the reference ``/work/shared/reference/arena-api.md``:

* §1 Authentication: a bearer credential (an API key or an issued OAuth access token) is required
  on every ``/api/`` path (401 ``{"detail": "Not authenticated"}`` otherwise), and the Keycloak
  paths of §1.3 (device authorisation, token polling and refresh, logout; form-encoded) are
  served by the same server for one realm and client id.
* §2 Transport: JSON and multipart request bodies (§2.3), the optional ``{"ok": true, "data": ...}``
  envelope (§2.4), NDJSON progress streams sent with chunked encoding (§2.5), and the endpoints of
  §2.6 #1-#10 and #15-#24 as detailed in §2.7. Datasets (#11-#14), inference and on-prem (#25-#34)
  are not served; ``/api/cli/v1/capabilities`` answers 404 like any unknown path (§2.7.10, §8.8).
* §5.3 error bodies: JSON objects with a ``message`` (``detail`` for auth failures, ``error`` and
  ``error_description`` on the Keycloak paths) and sometimes extra keys.
* §6.1 submitted payloads (the JSON form and the multipart form), checked lightly.
* §8 notes for a stand-in.

For tests it adds: a record of every request (:class:`RecordedRequest`), fault injection
(:meth:`ArenaServer.inject`), and idempotent submission through an ``Idempotency-Key`` header.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import io
import json
import re
import secrets
import socketserver
import sys
import tarfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn
from urllib.parse import parse_qs, urlsplit

from .hostile import HOSTILE_KINDS, write_hostile

CLI = "/api/cli/v1"
SUBMIT_PATH = f"{CLI}/experiments/jobs/submit"
KEYCLOAK = r"/realms/(?P<realm>[^/]+)/protocol/openid-connect"
DEVICE_AUTH_PATH = "/realms/arena/protocol/openid-connect/auth/device"
TOKEN_PATH = "/realms/arena/protocol/openid-connect/token"
LOGOUT_PATH = "/realms/arena/protocol/openid-connect/logout"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
NDJSON = "application/x-ndjson"
FAULT_KINDS = ("status", "429", "drop", "delay", "truncate_stream", *HOSTILE_KINDS)
BUILTIN_ENVIRONMENTS = (
    "CartPole-v1",
    "LunarLander-v3",
    "Acrobot-v1",
    "MountainCar-v0",
    "Pendulum-v1",
    "simple_spread_v3",
)
ACTIVE = frozenset({"queued", "running"})
VALIDATION_CHECKS = ("import", "reset", "step", "observation_space", "action_space")
ENV_BASES = frozenset({"Env", "ParallelEnv", "GemEnv", "AnylogicSim"})
PROFILE = {
    "avg_cpu_per_env": 12.5,
    "memory_per_env_gb": 0.25,
    "peak_cpu_per_env": 31.0,
    "steps_per_second": 1850.0,
}


# --------------------------------------------------------------------------- records and replies


@dataclass
class UploadedFile:
    """One file part of a multipart body."""

    filename: str
    content_type: str
    data: bytes


@dataclass
class RecordedRequest:
    """One request as the server received it. Header names are lower-cased."""

    method: str
    path: str
    query: dict[str, str]  # the first value of each parameter
    query_all: dict[str, list[str]]  # every value, e.g. repeated ``metric``
    headers: dict[str, str]
    body: bytes
    json: Any = None  # the parsed body when it was ``application/json``
    form: dict[str, str] = field(default_factory=dict)  # urlencoded fields or multipart text parts
    files: dict[str, UploadedFile] = field(default_factory=dict)  # multipart file parts

    def arg(self, name: str) -> str | None:
        """The query parameter ``name``; an empty value counts as absent (§8.3)."""
        return self.query.get(name, "").strip() or None


@dataclass
class Reply:
    """A complete (non-streamed) response."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stream:
    """An NDJSON response, written one event per chunk (§2.5)."""

    events: list[dict[str, Any]]
    status: int = 200


def json_reply(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    body = json.dumps(payload).encode()
    return Reply(status, body, {"Content-Type": "application/json", **(headers or {})})


def text_reply(text: str, status: int = 200, content_type: str = "text/plain") -> Reply:
    return Reply(status, text.encode(), {"Content-Type": f"{content_type}; charset=utf-8"})


class ApiError(Exception):
    """Raised by a handler; becomes a JSON error body (§5.3)."""

    def __init__(self, status: int, message: str | None = None, **extras: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = ({"message": message} if message is not None else {}) | extras


class StreamFailure(Exception):
    """Raised while building a stream; becomes a final ``failed`` event (§2.5)."""

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def event(self, stage: str) -> dict[str, Any]:
        extra: dict[str, Any] = {"detail": self.detail} if self.detail else {}
        return _event("failed", stage, self.message, level="error", **extra)


def _oauth_error(error: str, description: str, status: int = 400) -> ApiError:
    return ApiError(status, error=error, error_description=description)


# --------------------------------------------------------------------------- faults


@dataclass
class Fault:
    """A scripted failure for requests matching ``method``/``path`` (None matches any).

    Kinds: ``status`` (answer ``status`` with ``body``), ``429`` (answer 429 with ``Retry-After``),
    ``drop`` (close the connection without a response), ``delay`` (wait ``seconds``, then answer),
    ``truncate_stream`` (send ``after_lines`` NDJSON lines, or half of a plain body, then close).
    With ``after_processing`` the request is handled (its side effects happen) before the fault.
    The hostile kinds (``drip``, ``drip_headers``, ``silent``, ``raw``, ``redirect``, ``huge``)
    are described in :mod:`tests.arena.hostile`; they use ``seconds``, ``body``, ``status``,
    ``location``, ``size``, ``chunked`` and ``content_type``, and ``huge`` counts what it sent
    in ``sent``.
    """

    kind: str
    path: str | None = None
    method: str | None = None
    times: int = 1
    status: int = 503
    body: Any = None
    retry_after: float | None = None
    seconds: float = 1.0
    after_processing: bool = False
    after_lines: int = 1
    location: str = ""
    size: int = 0
    chunked: bool = True
    content_type: str = "application/json"
    sent: int = 0

    def matches(self, request: RecordedRequest) -> bool:
        return (
            self.times > 0
            and self.path in (None, request.path)
            and (self.method is None or self.method.upper() == request.method)
        )

    def reply(self) -> Reply:
        status = 429 if self.kind == "429" else self.status
        retry_after = 1 if self.kind == "429" and self.retry_after is None else self.retry_after
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        if isinstance(self.body, (bytes, str)):
            reply = text_reply(self.body if isinstance(self.body, str) else self.body.decode())
            reply.status, reply.headers = status, reply.headers | headers
            return reply
        body = self.body if self.body is not None else {"message": f"Injected fault: HTTP {status}"}
        return json_reply(body, status, headers)


# --------------------------------------------------------------------------- settings and state


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class ArenaSettings:
    """Behaviour switches; change them on ``server.settings`` at any time."""

    envelope: bool = True  # wrap JSON success payloads in {"ok": true, "data": ...} (§2.4)
    unenveloped_paths: set[str] = field(
        default_factory=lambda: {"/api/users/current", "/api/users/credits"}
    )
    realm: str = "arena"
    client_id: str = "arena-cli"
    device_interval: float = 0.05  # seconds; real Keycloak sends an integer (5)
    device_expires_in: int = 600
    auto_approve_after: int | None = 2  # the first N polls are pending; None: approve_device()
    slow_down_once: bool = False  # answer each device code's first poll with slow_down
    access_token_ttl: int = 300
    refresh_token_ttl: int = 1800
    stream_delay: float = 0.0  # pause between NDJSON lines
    errors_in_stream: bool = False  # submit rejections as a failed event instead of HTTP errors
    default_resource: str = "arena-medium"  # used when resource_id is null
    max_metric_rows: int = 50_000


@dataclass
class EnvironmentVersion:
    """One version of a registered (custom) environment."""

    validated: bool = True
    profiled: bool = True
    entrypoints: list[str] = field(default_factory=list)
    entrypoint: str | None = None
    description: str | None = None
    multi_agent: bool = False
    language_based: bool = False

    def summary(self) -> dict[str, bool]:
        return {"validated": self.validated, "profiled": self.profiled}


METRIC_COLUMNS = ("step", "fitness", "score", "loss")


def sample_metrics_csv(rows: int) -> str:
    """A deterministic metrics table with ``rows`` rows (columns: step, fitness, score, loss)."""
    lines = [",".join(METRIC_COLUMNS)]
    lines += [f"{i * 1000},{i * 10.5:.2f},{i * 9.25:.2f},{1 / (i + 1):.4f}" for i in range(rows)]
    return "\n".join(lines) + "\n"


@dataclass
class Experiment:
    id: int
    name: str
    project: str
    status: str = "queued"
    created_at: str = field(default_factory=_now)
    resource_id: str = "arena-medium"
    num_nodes: int = 1
    manifest: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    metrics_csv: str = field(default_factory=lambda: sample_metrics_csv(0))

    def row(self) -> dict[str, Any]:
        """The experiment as ``experiments/list`` shows it."""
        algorithm = self.manifest.get("algorithm") or {}
        environment = self.manifest.get("environment") or {}
        return {
            "id": self.id,
            "name": self.name,
            "project": self.project,
            "status": self.status,
            "created_at": self.created_at,
            "resource_id": self.resource_id,
            "num_nodes": self.num_nodes,
            "algorithm": algorithm.get("name"),
            "environment": environment.get("name"),
        }


@dataclass
class DeviceGrant:
    device_code: str
    user_code: str
    expires_at: float
    polls: int = 0
    approved: bool = False
    denied: bool = False
    slowed: bool = False


@dataclass(frozen=True)
class Submission:
    """A submit request, normalised from either form (§2.7.4); equal requests compare equal."""

    manifest: dict[str, Any]
    resource_id: str | None
    num_nodes: int | None
    project: str | None
    experiment_name: str | None
    completion: str | None = None
    reward_file: bytes | None = None


def _default_tiers() -> dict[str, dict[str, Any]]:
    def tier(name: str, gpus: int, gpu: str | None, cpus: int, ram: int, price: float) -> dict:
        return {
            "name": name,
            "num_gpus": gpus,
            "gpu_type": gpu,
            "num_cpus": cpus,
            "ram_gb": ram,
            "price_per_node_hour": price,
        }

    return {
        "arena-small": tier("arena-small", 0, None, 4, 16, 1.0),
        "arena-medium": tier("arena-medium", 1, "NVIDIA L4", 8, 32, 4.5),
        "arena-large": tier("arena-large", 4, "NVIDIA A10G", 48, 192, 16.0),
    }


def _default_experiments() -> list[Experiment]:
    done = Experiment(1, "cartpole-dqn", "demo", status="completed", resource_id="arena-small")
    done.manifest = {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"}}
    done.metrics_csv = sample_metrics_csv(20)
    done.checkpoints = [
        {"steps": s, "size_mb": 1.25, "evaluation_score": s / 100, "training_score": s / 120}
        for s in (5000, 10000, 20000)
    ]
    running = Experiment(2, "lunar-ppo", "demo", status="running")
    running.manifest = {"algorithm": {"name": "PPO"}, "environment": {"name": "LunarLander-v3"}}
    running.metrics_csv = sample_metrics_csv(5)
    return [done, running]


@dataclass
class ArenaState:
    """Everything the server knows. Guard direct changes during requests with ``server.lock``."""

    api_keys: set[str] = field(default_factory=lambda: {"arena_pat_test_key"})
    user: dict[str, Any] = field(
        default_factory=lambda: {
            "id": "user-1",
            "first_name": "Ada",
            "last_name": "Lovelace",
            "email": "ada@example.com",
            "username": "ada",
        }
    )
    credits: float = 1000.0
    tiers: dict[str, dict[str, Any]] = field(default_factory=_default_tiers)
    projects: list[dict[str, Any]] = field(
        default_factory=lambda: [{"name": "demo", "type": "Classic RL", "description": "Demo"}]
    )
    environments: dict[str, dict[str, EnvironmentVersion]] = field(
        default_factory=lambda: {
            "GridWorld": {"v1": EnvironmentVersion(entrypoints=["gridworld.env:GridWorldEnv"])}
        }
    )
    datasets: set[str] = field(default_factory=set)  # names an LLM manifest may use
    experiments: list[Experiment] = field(default_factory=_default_experiments)
    access_tokens: dict[str, float] = field(default_factory=dict)  # token -> expiry (epoch s)
    refresh_tokens: dict[str, float] = field(default_factory=dict)
    device_grants: dict[str, DeviceGrant] = field(default_factory=dict)
    submissions: dict[str, tuple[Submission, dict[str, Any]]] = field(default_factory=dict)


# --------------------------------------------------------------------------- request helpers


def _json_object(req: RecordedRequest) -> dict[str, Any]:
    if not isinstance(req.json, dict):
        raise ApiError(422, "Request body must be a JSON object")
    return req.json


def _required_str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ApiError(422, f"Field '{key}' is required")
    return value.strip()


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ApiError(422, f"Field '{key}' must be a string")
    return value


def _as_int(value: Any, key: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ApiError(422, f"Field '{key}' must be an integer")


def _required_arg(req: RecordedRequest, name: str) -> str:
    value = req.arg(name)
    if value is None:
        raise ApiError(400, f"Query parameter '{name}' is required")
    return value


def _flag(form: dict[str, str], key: str) -> bool:
    return form.get(key, "").strip().lower() == "true"


def _event(status: str, stage: str, message: str, *, kind: str = "status", **extra: Any) -> dict:
    return {"kind": kind, "stage": stage, "status": status, "message": message, **extra}


def _stream(stage: str, message: str, steps: Callable[[], list[dict[str, Any]]]) -> Stream:
    """A ``started`` event, then the steps' events, or a ``failed`` event if a step fails."""
    events = [_event("started", stage, message)]
    try:
        events += steps()
    except StreamFailure as failure:
        events.append(failure.event(stage))
    return Stream(events)


# --------------------------------------------------------------------------- Keycloak (§1.3)


def _check_client(arena: ArenaServer, req: RecordedRequest, realm: str) -> None:
    if realm != arena.settings.realm:
        raise ApiError(404, error="Realm does not exist")
    if req.form.get("client_id") != arena.settings.client_id:
        raise _oauth_error("invalid_client", "Invalid client or Invalid client credentials", 401)


def kc_device_auth(arena: ArenaServer, req: RecordedRequest, realm: str) -> Reply:
    _check_client(arena, req, realm)
    user_code = "-".join(secrets.token_hex(2).upper() for _ in range(2))
    grant = DeviceGrant(
        secrets.token_urlsafe(24), user_code, time.time() + arena.settings.device_expires_in
    )
    arena.state.device_grants[grant.device_code] = grant
    verify = f"{arena.url}/realms/{realm}/device"
    return json_reply(
        {
            "device_code": grant.device_code,
            "user_code": user_code,
            "verification_uri": verify,
            "verification_uri_complete": f"{verify}?user_code={user_code}",
            "expires_in": arena.settings.device_expires_in,
            "interval": arena.settings.device_interval,
        }
    )


def kc_token(arena: ArenaServer, req: RecordedRequest, realm: str) -> Reply:
    _check_client(arena, req, realm)
    grant_type = req.form.get("grant_type")
    if grant_type == DEVICE_GRANT:
        return _device_token(arena, req.form.get("device_code", ""))
    if grant_type == "refresh_token":
        token = req.form.get("refresh_token", "")
        if arena.state.refresh_tokens.get(token, 0) <= time.time():
            raise _oauth_error("invalid_grant", "Invalid refresh token")
        return json_reply(arena.issue_tokens())
    raise _oauth_error("unsupported_grant_type", "Unsupported grant_type")


def _device_token(arena: ArenaServer, device_code: str) -> Reply:
    grant = arena.state.device_grants.get(device_code)
    if grant is None:
        raise _oauth_error("invalid_grant", "Device code not valid")
    error = _device_grant_error(arena.settings, grant)
    if error is not None:
        raise _oauth_error(error, f"Device authorization: {error}")
    del arena.state.device_grants[device_code]
    return json_reply(arena.issue_tokens())


def _device_grant_error(settings: ArenaSettings, grant: DeviceGrant) -> str | None:
    """The OAuth error for one poll, or None once the grant is approved."""
    if time.time() >= grant.expires_at:
        return "expired_token"
    if settings.slow_down_once and not grant.slowed:
        grant.slowed = True
        return "slow_down"
    grant.polls += 1
    if grant.denied:
        return "access_denied"
    if settings.auto_approve_after is not None and grant.polls > settings.auto_approve_after:
        grant.approved = True
    return None if grant.approved else "authorization_pending"


def kc_logout(arena: ArenaServer, req: RecordedRequest, realm: str) -> Reply:
    _check_client(arena, req, realm)
    if arena.state.refresh_tokens.pop(req.form.get("refresh_token", ""), None) is None:
        raise _oauth_error("invalid_grant", "Invalid refresh token")
    return Reply(204)


# --------------------------------------------------------------------------- users, resources


def get_user(arena: ArenaServer, req: RecordedRequest) -> Any:
    return dict(arena.state.user)


def get_credits(arena: ArenaServer, req: RecordedRequest) -> Any:
    return {"credits": arena.state.credits}


def list_resources(arena: ArenaServer, req: RecordedRequest) -> Any:
    return {"tiers": {key: dict(tier) for key, tier in arena.state.tiers.items()}}


# --------------------------------------------------------------------------- environments


def _find_version(
    arena: ArenaServer, name: str, version: str | None
) -> tuple[str, EnvironmentVersion] | None:
    """A registered environment version; ``None`` asks for the latest (the last added)."""
    versions = arena.state.environments.get(name) or {}
    if version is None:
        return next(reversed(versions.items()), None)
    found = versions.get(version)
    return None if found is None else (version, found)


def _require_version(
    arena: ArenaServer, name: str, version: str | None
) -> tuple[str, EnvironmentVersion]:
    found = _find_version(arena, name, version)
    if found is None:
        which = f" version {version}" if version else ""
        raise ApiError(404, f"Environment {name}{which} not found")
    return found


def list_environments(arena: ArenaServer, req: RecordedRequest) -> Any:
    catalogue = {
        name: {version: env.summary() for version, env in versions.items()}
        for name, versions in arena.state.environments.items()
    }
    if req.arg("include_arena") == "true":
        builtins = {
            b: {"latest": {"validated": True, "profiled": True}} for b in BUILTIN_ENVIRONMENTS
        }
        catalogue = builtins | catalogue
    name = req.arg("name")
    if name is not None:
        catalogue = {name: catalogue[name]} if name in catalogue else {}
    return catalogue


def environment_exists(arena: ArenaServer, req: RecordedRequest) -> Any:
    name = _required_arg(req, "name")
    return {"exists": _find_version(arena, name, req.arg("version")) is not None}


def environment_entrypoints(arena: ArenaServer, req: RecordedRequest) -> Any:
    _, env = _require_version(arena, _required_arg(req, "name"), req.arg("version"))
    return list(env.entrypoints)


def _choose_entrypoint(available: list[str], requested: str | None) -> str:
    if requested:
        if requested not in available:
            message = f"Entrypoint '{requested}' not found in the environment source"
            raise StreamFailure(message, available_entrypoints=available)
        return requested
    if len(available) == 1:
        return available[0]
    if not available:
        raise StreamFailure("No environment class found in the environment source")
    raise StreamFailure(
        "Multiple environment entrypoints found; choose one",
        error_code="AMBIGUOUS_ENTRYPOINT",
        available_entrypoints=available,
    )


def _validation_steps(
    name: str, version: str, env: EnvironmentVersion, requested: str | None, rollouts: bool
) -> list[dict[str, Any]]:
    entrypoint = _choose_entrypoint(env.entrypoints, requested)
    checks = [*VALIDATION_CHECKS, "rollouts"] if rollouts else list(VALIDATION_CHECKS)
    result = {"success": True, "warnings": []}
    detail: dict[str, Any] = {"result": result}
    events = [
        _event("completed", "validation", check, kind="check", detail=detail | {"check": check})
        for check in checks
    ]
    env.validated = env.profiled = True  # the platform profiles automatically on success
    env.entrypoint = entrypoint
    info: dict[str, Any] = {"name": name, "version": version, "entrypoint": entrypoint}
    info["multi_agent"] = env.multi_agent
    if rollouts:
        info["avg_random_reward"] = 21.5
    done = _event("completed", "validation", "Environment validated", detail={"env_info": info})
    return [*events, done]


def validate_environment(arena: ArenaServer, req: RecordedRequest) -> Any:
    body = _json_object(req)
    name = _required_str(body, "name")
    version, env = _require_version(arena, name, _optional_str(body, "version"))
    entrypoint, rollouts = _optional_str(body, "entrypoint"), bool(body.get("do_rollouts"))
    return _stream(
        "validation",
        f"Validating environment {name} ({version})",
        lambda: _validation_steps(name, version, env, entrypoint, rollouts),
    )


_CLASS_DEF = re.compile(r"^class\s+(\w+)\s*\(([^)]*)\)\s*:", re.MULTILINE)


def _python_sources(archive: bytes) -> dict[str, str]:
    try:
        sources = {}
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            for member in tar.getmembers():
                handle = tar.extractfile(member) if member.name.endswith(".py") else None
                if handle is not None:
                    sources[member.name] = handle.read().decode("utf-8", "replace")
        return sources
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise StreamFailure("The uploaded source is not a readable tar.gz archive") from exc


def scan_entrypoints(archive: bytes) -> list[str]:
    """``module:Class`` for each class in the archive deriving from an environment base class."""
    found = []
    for path, source in sorted(_python_sources(archive).items()):
        module = path.removeprefix("./").removesuffix(".py").replace("/", ".")
        module = module.removesuffix(".__init__")
        for cls, bases in _CLASS_DEF.findall(source):
            names = {base.strip().split("[")[0].split(".")[-1] for base in bases.split(",")}
            if names & ENV_BASES:
                found.append(f"{module}:{cls}")
    return found


def create_and_validate(arena: ArenaServer, req: RecordedRequest) -> Any:
    name = req.form.get("name", "").strip()
    archive = req.files.get("file")
    if not name or archive is None:
        raise ApiError(422, "A 'name' field and a 'file' archive part are required")
    version = req.form.get("version") or "v1"
    env = EnvironmentVersion(
        validated=False,
        profiled=False,
        description=req.form.get("description") or None,
        multi_agent=_flag(req.form, "multi_agent"),
        language_based=_flag(req.form, "language_based"),
    )
    arena.state.environments.setdefault(name, {})[version] = env
    requirements = req.files.get("requirements")

    def steps() -> list[dict[str, Any]]:
        env.entrypoints = scan_entrypoints(archive.data)
        events = []
        if requirements is not None and requirements.data.strip():
            events.append(_event("running", "validation", "Installing requirements"))
        rollouts = _flag(req.form, "do_rollouts")
        return events + _validation_steps(name, version, env, req.form.get("entrypoint"), rollouts)

    return _stream("upload", f"Received {archive.filename} ({len(archive.data)} bytes)", steps)


def profile_environment(arena: ArenaServer, req: RecordedRequest) -> Any:
    body = _json_object(req)
    name = _required_str(body, "name")
    version, env = _require_version(arena, name, _optional_str(body, "version"))
    if not env.validated:
        raise ApiError(409, f"Environment {name} ({version}) has not been validated")
    env.profiled = True
    return Stream(
        [
            _event("started", "profiling", f"Profiling {name} ({version})"),
            _event("running", "profiling", "Stepping 4 copies of the environment"),
            _event("completed", "profiling", "Profiling finished", detail=dict(PROFILE)),
        ]
    )


def delete_environment(arena: ArenaServer, req: RecordedRequest) -> Any:
    body = _json_object(req)
    name, version = _required_str(body, "name"), _optional_str(body, "version")
    versions = arena.state.environments.get(name)
    if not versions or (version is not None and version not in versions):
        _require_version(arena, name, version)  # raises the 404
    if version is not None:
        del versions[version]
    if version is None or not versions:
        del arena.state.environments[name]
    which = f"version {version} of " if version else "all versions of "
    return {"message": f"Deleted {which}{name}", "name": name, "version": version}


def duplicate_environment(arena: ArenaServer, req: RecordedRequest) -> Any:
    body = _json_object(req)
    name, new = _required_str(body, "name"), _required_str(body, "new_version_name")
    source, env = _require_version(arena, name, _optional_str(body, "version"))
    versions = arena.state.environments[name]
    if new in versions:
        raise ApiError(409, f"Version {new} of environment {name} already exists")
    versions[new] = dataclasses.replace(env, entrypoints=list(env.entrypoints))
    return {"name": name, "source_version": source, "new_version": new}


# --------------------------------------------------------------------------- submission


def _reject(arena: ArenaServer, status: int, message: str, **extras: Any) -> NoReturn:
    """A business-rule rejection: an HTTP error, or a failed stream event if so configured."""
    if arena.settings.errors_in_stream:
        raise StreamFailure(message, **extras)
    raise ApiError(status, message, **extras)


def _submission_fields(req: RecordedRequest) -> dict[str, Any]:
    if not (req.form or req.files):
        return _json_object(req)
    fields: dict[str, Any] = dict(req.form)
    try:
        fields["manifest"] = json.loads(req.form.get("manifest", ""))
    except ValueError as exc:
        raise ApiError(422, "Part 'manifest' must be a JSON document") from exc
    reward = req.files.get("reward_file")
    fields["reward_file"] = None if reward is None else reward.data
    return fields


def parse_submission(req: RecordedRequest) -> Submission:
    fields = _submission_fields(req)
    manifest = fields.get("manifest")
    if not isinstance(manifest, dict):
        raise ApiError(422, "Field 'manifest' must be an object")
    resource = fields.get("resource_id")
    return Submission(
        manifest=manifest,
        resource_id=None if resource in (None, "") else str(resource),
        num_nodes=_as_int(fields.get("num_nodes"), "num_nodes"),
        project=_optional_str(fields, "project"),
        experiment_name=_optional_str(fields, "experiment_name"),
        completion=_optional_str(fields, "completion"),
        reward_file=fields.get("reward_file"),
    )


def _section_name(manifest: dict[str, Any], section: str) -> tuple[str, dict[str, Any]]:
    value = manifest.get(section)
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ApiError(422, f"Manifest field '{section}.name' is required")
    return value["name"], value


def _check_submission(arena: ArenaServer, sub: Submission) -> tuple[str, dict[str, Any], int]:
    """The project, tier and node count of a valid submission; rejects an invalid one."""
    _section_name(sub.manifest, "algorithm")
    env_name, env = _section_name(sub.manifest, "environment")
    if sub.project is None:
        _reject(arena, 400, "A project is required to submit an experiment")
    if arena.find_project(sub.project) is None:
        _reject(arena, 404, f"Project '{sub.project}' not found")
    known = env_name in BUILTIN_ENVIRONMENTS or env_name in arena.state.datasets
    if not known and _find_version(arena, env_name, env.get("version")) is None:
        _reject(arena, 404, f"Environment {env_name} not found", error_code="ENV_NOT_FOUND")
    tier = arena.find_tier(sub.resource_id or arena.settings.default_resource)
    if tier is None:
        available = sorted(arena.state.tiers)
        _reject(arena, 422, f"Unknown resource_id '{sub.resource_id}'", available=available)
    nodes = 1 if sub.num_nodes is None else sub.num_nodes
    if nodes < 1:
        _reject(arena, 422, "num_nodes must be at least 1")
    cost = tier["price_per_node_hour"] * nodes
    if arena.state.credits < cost:
        _reject(arena, 402, "Insufficient credits", required_credits_per_hour=cost)
    return sub.project, tier, nodes


def _submit_steps(arena: ArenaServer, sub: Submission, key: str | None) -> list[dict[str, Any]]:
    project, tier, nodes = _check_submission(arena, sub)
    experiment = arena.add_experiment(
        sub.experiment_name,
        project,
        resource_id=tier["name"],
        num_nodes=nodes,
        manifest=sub.manifest,
    )
    detail = {"accepted": True, "experiment_id": experiment.id, "experiment_name": experiment.name}
    completed = _event("completed", "submission", "Experiment submitted", detail=detail)
    if key:
        arena.state.submissions[key] = (sub, completed)
    return [
        _event("running", "submission", "Manifest accepted"),
        _event("running", "submission", f"Reserved {nodes} x {tier['name']}"),
        _event("running", "submission", "Job queued", level="secondary-info"),
        completed,
    ]


def submit_experiment(arena: ArenaServer, req: RecordedRequest) -> Any:
    sub = parse_submission(req)
    key = req.headers.get("idempotency-key", "").strip() or None
    if key and key in arena.state.submissions:
        previous, completed = arena.state.submissions[key]
        if previous != sub:
            raise ApiError(409, "Idempotency-Key was already used with a different request")
        return Stream([completed])
    return _stream("submission", "Submitting experiment", lambda: _submit_steps(arena, sub, key))


# --------------------------------------------------------------------------- experiments


def _require_experiment(arena: ArenaServer, name: str, project: str | None = None) -> Experiment:
    if project is not None:
        _require_project(arena, project)
    experiment = arena.find_experiment(name, project)
    if experiment is None:
        raise ApiError(404, f"Experiment '{name}' not found")
    return experiment


def list_experiments(arena: ArenaServer, req: RecordedRequest) -> Any:
    project = _require_project(arena, _required_arg(req, "project"))
    return [e.row() for e in arena.state.experiments if e.project == project["name"]]


def resume_experiment(arena: ArenaServer, req: RecordedRequest) -> Any:
    body = _json_object(req)
    experiment = _require_experiment(arena, _required_str(body, "experiment_name"))
    max_steps = _as_int(body.get("max_steps"), "max_steps")
    if max_steps is None or max_steps < 1:
        raise ApiError(422, "Field 'max_steps' must be a positive integer")
    if experiment.status in ACTIVE:
        raise ApiError(409, f"Experiment '{experiment.name}' is already running")
    experiment.status, experiment.max_steps = "running", max_steps
    message = f"Experiment '{experiment.name}' resumed"
    return {"message": message, "experiment_name": experiment.name, "max_steps": max_steps}


def stop_experiment(arena: ArenaServer, req: RecordedRequest) -> Any:
    experiment = _require_experiment(arena, _required_str(_json_object(req), "experiment_name"))
    if experiment.status not in ACTIVE:
        raise ApiError(409, f"Experiment '{experiment.name}' is not running")
    experiment.status = "stopped"
    return text_reply("Ok")


def list_checkpoints(arena: ArenaServer, req: RecordedRequest) -> Any:
    experiment = _require_experiment(arena, _required_arg(req, "experiment_name"))
    return [dict(checkpoint) for checkpoint in experiment.checkpoints]


def _metric_columns(header: list[str], wanted: list[str]) -> list[int]:
    """Indices of the requested columns (all when none); the first (step) column always stays."""
    if not wanted:
        return list(range(len(header)))
    unknown = [name for name in wanted if name not in header]
    if unknown:
        raise ApiError(404, f"Unknown metric(s): {', '.join(unknown)}", available=header[1:])
    return [0, *(header.index(name) for name in dict.fromkeys(wanted) if name != header[0])]


def _metrics_csv(arena: ArenaServer, experiment: Experiment, req: RecordedRequest) -> Reply:
    header, *rows = list(csv.reader(io.StringIO(experiment.metrics_csv)))
    limit = _as_int(req.arg("preview_rows"), "preview_rows") or 0
    if limit < 0:
        raise ApiError(422, "Query parameter 'preview_rows' must not be negative")
    columns = _metric_columns(header, [m for m in req.query_all.get("metric", []) if m])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in [header, *rows[: min(limit, arena.settings.max_metric_rows)]]:
        writer.writerow([row[i] for i in columns])
    reply = text_reply(out.getvalue(), content_type="text/csv")
    disposition = f'attachment; filename="{experiment.name}_metrics.csv"'
    reply.headers["Content-Disposition"] = disposition
    return reply


def experiment_metrics(arena: ArenaServer, req: RecordedRequest) -> Any:
    name = _required_arg(req, "experiment_name")
    experiment = _require_experiment(arena, name, req.arg("project"))
    if req.arg("preview_rows") is not None:
        return _metrics_csv(arena, experiment, req)
    header = next(csv.reader(io.StringIO(experiment.metrics_csv)))
    names = sorted(header[1:])
    return (
        {"experiment_id": experiment.id, "metrics": names}
        if req.arg("details") == "true"
        else names
    )


# --------------------------------------------------------------------------- projects


def _require_project(arena: ArenaServer, name: str) -> dict[str, Any]:
    project = arena.find_project(name)
    if project is None:
        raise ApiError(404, f"Project '{name}' not found")
    return project


def list_projects(arena: ArenaServer, req: RecordedRequest) -> Any:
    return [dict(project) for project in arena.state.projects]


def create_project(arena: ArenaServer, req: RecordedRequest) -> Any:
    body = _json_object(req)
    name = _required_str(body, "name")
    if arena.find_project(name) is not None:
        raise ApiError(409, f"Project '{name}' already exists")
    kind = "LLM" if body.get("llm_based") else "Classic RL"
    project = {"name": name, "type": kind, "description": body.get("description") or ""}
    arena.state.projects.append(project)
    return {"message": f"Project '{name}' created", **project}


def delete_project(arena: ArenaServer, req: RecordedRequest) -> Any:
    project = _require_project(arena, _required_str(_json_object(req), "name"))
    arena.state.projects.remove(project)
    return {"message": f"Project '{project['name']}' deleted"}


# --------------------------------------------------------------------------- routing


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Callable[..., Any]


def _route(method: str, path: str, handler: Callable[..., Any]) -> Route:
    return Route(method, re.compile(path), handler)


ROUTES = (
    _route("POST", f"{KEYCLOAK}/auth/device", kc_device_auth),
    _route("POST", f"{KEYCLOAK}/token", kc_token),
    _route("POST", f"{KEYCLOAK}/logout", kc_logout),
    _route("GET", "/api/users/current", get_user),
    _route("GET", "/api/users/credits", get_credits),
    _route("GET", f"{CLI}/environments", list_environments),
    _route("GET", f"{CLI}/environments/exists", environment_exists),
    _route("GET", f"{CLI}/environments/entrypoints", environment_entrypoints),
    _route("POST", f"{CLI}/environments/validate", validate_environment),
    _route("POST", f"{CLI}/environments/create-and-validate", create_and_validate),
    _route("POST", f"{CLI}/environments/profile", profile_environment),
    _route("DELETE", f"{CLI}/environments/delete", delete_environment),
    _route("POST", f"{CLI}/environments/duplicate", duplicate_environment),
    _route("POST", SUBMIT_PATH, submit_experiment),
    _route("GET", f"{CLI}/experiments/list", list_experiments),
    _route("POST", f"{CLI}/experiments/jobs/resume", resume_experiment),
    _route("POST", f"{CLI}/experiments/jobs/stop", stop_experiment),
    _route("GET", f"{CLI}/experiments/jobs/checkpoints", list_checkpoints),
    _route("GET", f"{CLI}/experiments/metrics", experiment_metrics),
    _route("GET", f"{CLI}/resources/list", list_resources),
    _route("GET", f"{CLI}/projects", list_projects),
    _route("POST", f"{CLI}/projects/create", create_project),
    _route("DELETE", f"{CLI}/projects/delete", delete_project),
)


def _resolve(method: str, path: str) -> tuple[Route | None, dict[str, str], bool]:
    """The route for a request, its path parameters, and whether the path exists at all."""
    path_known = False
    for route in ROUTES:
        match = route.pattern.fullmatch(path)
        if match is not None and route.method == method:
            return route, match.groupdict(), True
        path_known = path_known or match is not None
    return None, {}, path_known


# --------------------------------------------------------------------------- body parsing

_BOUNDARY = re.compile(r'boundary="?([^";]+)"?')
_PARAM = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _part_headers(head: bytes) -> dict[str, str]:
    lines = head.decode("utf-8", "replace").split("\r\n")
    pairs = (line.partition(":") for line in lines if ":" in line)
    return {name.strip().lower(): value.strip() for name, _, value in pairs}


def parse_multipart(
    body: bytes, content_type: str
) -> tuple[dict[str, str], dict[str, UploadedFile]]:
    """Text parts and file parts of a ``multipart/form-data`` body."""
    form: dict[str, str] = {}
    files: dict[str, UploadedFile] = {}
    match = _BOUNDARY.search(content_type)
    if match is None:
        return form, files
    for chunk in body.split(b"--" + match.group(1).encode())[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, data = chunk.partition(b"\r\n\r\n")
        headers = _part_headers(head)
        params = dict(_PARAM.findall(headers.get("content-disposition", "")))
        data = data.removesuffix(b"\r\n")
        if "filename" in params:
            kind = headers.get("content-type", "application/octet-stream")
            files[params.get("name", "")] = UploadedFile(params["filename"], kind, data)
        elif "name" in params:
            form[params["name"]] = data.decode("utf-8", "replace")
    return form, files


def _parse_body(request: RecordedRequest) -> None:
    content_type = request.headers.get("content-type", "")
    mime = content_type.split(";")[0].strip().lower()
    if mime == "application/json" and request.body:
        try:
            request.json = json.loads(request.body)
        except ValueError:
            request.json = None
    elif mime == "application/x-www-form-urlencoded":
        fields = parse_qs(request.body.decode("utf-8", "replace"), keep_blank_values=True)
        request.form = {name: values[0] for name, values in fields.items()}
    elif mime == "multipart/form-data":
        request.form, request.files = parse_multipart(request.body, content_type)


# --------------------------------------------------------------------------- HTTP plumbing


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ArenaStandIn/1.0"
    timeout = 30
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    server: _HTTPServer

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def _serve(self) -> None:
        arena = self.server.arena
        try:
            request = self._read_request()
        except ValueError:
            self.close_connection = True
            self._write(json_reply({"message": "Malformed request"}, 400))
            return
        arena._record(request)
        try:
            self._answer(arena, request, arena._take_fault(request))
        except OSError:  # the client went away
            self.close_connection = True

    def _answer(self, arena: ArenaServer, request: RecordedRequest, fault: Fault | None) -> None:
        if fault is None:
            self._write(arena.handle(request))
        elif fault.kind in HOSTILE_KINDS:
            write_hostile(self, fault)
        elif fault.kind == "truncate_stream":
            self._write(arena.handle(request), cut_after=fault.after_lines)
        else:
            reply = arena.handle(request) if fault.after_processing else None
            if fault.kind == "delay":
                arena._stopping.wait(fault.seconds)
                self._write(arena.handle(request) if reply is None else reply)
            elif fault.kind == "drop":
                self.close_connection = True
            else:
                self._write(fault.reply())

    def _read_request(self) -> RecordedRequest:
        url = urlsplit(self.path)
        query_all = parse_qs(url.query, keep_blank_values=True)
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = RecordedRequest(
            method=self.command,
            path=url.path,
            query={name: values[0] for name, values in query_all.items()},
            query_all=query_all,
            headers=headers,
            body=self._read_body(headers),
        )
        _parse_body(request)
        return request

    def _read_body(self, headers: dict[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        length = int(headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _write(self, reply: Reply | Stream, cut_after: int | None = None) -> None:
        """Send a reply; with ``cut_after``, stop early and close (a truncated response)."""
        if isinstance(reply, Stream):
            self._write_stream(reply, cut_after)
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        body = reply.body
        if cut_after is not None:
            body, self.close_connection = body[: len(body) // 2], True
        self.wfile.write(body)

    def _write_stream(self, stream: Stream, cut_after: int | None) -> None:
        self.send_response(stream.status)
        self.send_header("Content-Type", NDJSON)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        arena = self.server.arena
        for index, event in enumerate(stream.events[:cut_after]):
            if index and arena.settings.stream_delay:
                arena._stopping.wait(arena.settings.stream_delay)
            self._chunk((json.dumps(event) + "\n").encode())
        if cut_after is None:
            self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, arena: ArenaServer, port: int) -> None:
        self.arena = arena
        super().__init__(("127.0.0.1", port), _RequestHandler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # skip HTTPServer's reverse DNS lookup
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


# --------------------------------------------------------------------------- the server


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(claims: dict[str, Any]) -> str:
    """An unsigned-in-effect JWT (random signature); clients only decode the payload's ``exp``."""
    header = {"alg": "RS256", "typ": "JWT", "kid": "arena-stand-in"}
    parts = (json.dumps(header).encode(), json.dumps(claims).encode(), secrets.token_bytes(32))
    return ".".join(_b64(part) for part in parts)


class ArenaServer:
    """The stand-in: ``ArenaServer(**settings).start()``, then talk to ``server.url``.

    * ``settings`` (:class:`ArenaSettings`) and ``state`` (:class:`ArenaState`) may be changed at
      any time; ``lock`` guards changes made while requests are in flight.
    * ``requests`` records every request; ``count(method, path)`` and ``requests_to(...)`` filter.
    * Credentials: ``state.api_keys``; ``issue_tokens(ttl=...)``, ``expire_access_tokens()``,
      ``revoke_refresh_tokens()``; device login: ``approve_device(code)``, ``deny_device(code)``,
      ``expire_device_codes()`` (or ``settings.auto_approve_after``).
    * Faults: ``inject(kind, path=..., method=..., times=..., ...)`` (see :class:`Fault`).
    """

    def __init__(self, settings: ArenaSettings | None = None, **overrides: Any) -> None:
        self.settings = dataclasses.replace(settings or ArenaSettings(), **overrides)
        self.state = ArenaState()
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self, port: int = 0) -> ArenaServer:
        if self._httpd is not None:
            raise RuntimeError("The Arena stand-in is already running")
        self._stopping.clear()
        self._httpd = _HTTPServer(self, port)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> ArenaServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("The Arena stand-in is not running")
        return f"http://127.0.0.1:{self._httpd.server_port}"

    # state shortcuts

    @property
    def api_keys(self) -> set[str]:
        return self.state.api_keys

    @property
    def projects(self) -> list[dict[str, Any]]:
        return self.state.projects

    @property
    def experiments(self) -> list[Experiment]:
        return self.state.experiments

    def find_project(self, name: str) -> dict[str, Any] | None:
        return next((p for p in self.state.projects if p["name"] == name), None)

    def find_tier(self, resource_id: str) -> dict[str, Any] | None:
        tiers = self.state.tiers
        return tiers.get(resource_id) or next(
            (t for t in tiers.values() if t["name"] == resource_id), None
        )

    def find_experiment(self, name: str, project: str | None = None) -> Experiment | None:
        """The latest experiment called ``name`` (in ``project`` if given)."""
        matches = [e for e in self.state.experiments if e.name == name]
        matches = [e for e in matches if project is None or e.project == project]
        return matches[-1] if matches else None

    def add_project(self, name: str, type: str = "Classic RL", description: str = "") -> dict:
        with self.lock:
            project = {"name": name, "type": type, "description": description}
            self.state.projects.append(project)
            return project

    def add_experiment(self, name: str | None, project: str = "demo", **fields: Any) -> Experiment:
        """Append an experiment (named ``exp-<id>`` when ``name`` is None)."""
        with self.lock:
            next_id = max((e.id for e in self.state.experiments), default=0) + 1
            experiment = Experiment(next_id, name or f"exp-{next_id}", project, **fields)
            self.state.experiments.append(experiment)
            return experiment

    def add_environment(self, name: str, version: str = "v1", **fields: Any) -> EnvironmentVersion:
        with self.lock:
            env = EnvironmentVersion(**fields)
            self.state.environments.setdefault(name, {})[version] = env
            return env

    # recorded requests

    def count(self, method: str, path: str) -> int:
        return len(self.requests_to(method, path))

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        with self.lock:
            return [r for r in self.requests if r.method == method.upper() and r.path == path]

    def _record(self, request: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(request)

    # credentials

    def issue_tokens(self, ttl: int | None = None, scope: str = "openid profile email") -> dict:
        """Mint an access/refresh token pair, as Keycloak's token endpoint returns it."""
        with self.lock:
            now = int(time.time())
            ttl = self.settings.access_token_ttl if ttl is None else ttl
            refresh_ttl = self.settings.refresh_token_ttl
            claims = {"iat": now, "azp": self.settings.client_id, "sub": self.state.user["id"]}
            access = make_jwt({**claims, "exp": now + ttl, "typ": "Bearer", "scope": scope})
            refresh = make_jwt({**claims, "exp": now + refresh_ttl, "typ": "Refresh"})
            self.state.access_tokens[access] = now + ttl
            self.state.refresh_tokens[refresh] = now + refresh_ttl
            return {
                "access_token": access,
                "expires_in": ttl,
                "refresh_expires_in": refresh_ttl,
                "refresh_token": refresh,
                "token_type": "Bearer",
                "not-before-policy": 0,
                "session_state": secrets.token_hex(8),
                "scope": scope,
            }

    def expire_access_tokens(self) -> None:
        """Every access token issued so far now gets 401."""
        with self.lock:
            self.state.access_tokens.clear()

    def revoke_refresh_tokens(self) -> None:
        """Every refresh token issued so far is now rejected with ``invalid_grant``."""
        with self.lock:
            self.state.refresh_tokens.clear()

    def _grants(self, code: str | None) -> list[DeviceGrant]:
        grants = self.state.device_grants.values()
        return [g for g in grants if code is None or code in (g.user_code, g.device_code)]

    def approve_device(self, code: str | None = None) -> int:
        """Approve the pending device login with this user/device code (all if None)."""
        with self.lock:
            grants = self._grants(code)
            for grant in grants:
                grant.approved = True
            return len(grants)

    def deny_device(self, code: str | None = None) -> int:
        """Make later polls for this device code (all if None) answer ``access_denied``."""
        with self.lock:
            grants = self._grants(code)
            for grant in grants:
                grant.denied = True
            return len(grants)

    def expire_device_codes(self) -> None:
        """Make later polls for every pending device code answer ``expired_token``."""
        with self.lock:
            for grant in self.state.device_grants.values():
                grant.expires_at = 0

    def _authenticated(self, request: RecordedRequest) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return False
        if token in self.state.api_keys:
            return True
        return self.state.access_tokens.get(token, 0) > time.time()

    # faults

    def inject(self, fault: str, **options: Any) -> Fault:
        """Queue a fault (see :class:`Fault` for the kinds and options); returns it."""
        if fault not in FAULT_KINDS:
            raise ValueError(f"Unknown fault {fault!r}; choose one of {FAULT_KINDS}")
        with self.lock:
            injected = Fault(fault, **options)
            self.faults.append(injected)
            return injected

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def _take_fault(self, request: RecordedRequest) -> Fault | None:
        with self.lock:
            fault = next((f for f in self.faults if f.matches(request)), None)
            if fault is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
            return fault

    # dispatch

    def handle(self, request: RecordedRequest) -> Reply | Stream:
        """Answer one request (no faults applied)."""
        route, params, path_known = _resolve(request.method, request.path)
        if route is None:
            detail = "Method Not Allowed" if path_known else "Not Found"
            return json_reply({"detail": detail}, 405 if path_known else 404)
        with self.lock:
            if request.path.startswith("/api/") and not self._authenticated(request):
                return json_reply(
                    {"detail": "Not authenticated"}, 401, {"WWW-Authenticate": "Bearer"}
                )
            try:
                result = route.handler(self, request, **params)
            except ApiError as error:
                return json_reply(error.body, error.status)
            except Exception:
                traceback.print_exc()
                return json_reply({"message": "Internal server error"}, 500)
        if isinstance(result, (Reply, Stream)):
            return result
        if self.settings.envelope and request.path not in self.settings.unenveloped_paths:
            result = {"ok": True, "data": result}
        return json_reply(result)
