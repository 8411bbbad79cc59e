"""The HTTP client of Arena's REST API (the wire format of AgileRL's ``agilerl-arena`` client).

Beyond the reference client it retries what is safe to retry, keeps one submission from
becoming two, refreshes tokens before they expire, and never shows a credential anywhere:

* GET and DELETE are retried (exponential backoff with full jitter, ``Retry-After`` honoured)
  on connection failures, timeouts, 429 and 5xx. Other POSTs are retried only when the server
  cannot have acted: the connection was never made, or it answered 429/503.
* A submission carries an ``Idempotency-Key`` (the same on every resend) and is also retried
  after a dropped connection, a timeout or a 5xx. When it is named, the project's experiments
  are listed before a resend; if the experiment appeared meanwhile, the first send worked and
  nothing is resent.
* A stored access token about to expire is refreshed before it is used, and once more after a
  401. The login (device flow) only runs when asked for.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import os
import random
import re
import sys
import time
import uuid
import webbrowser
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import Any

import httpx

from agile_arena import credentials
from agile_arena.errors import (
    API_KEY_HINT,
    ENVIRONMENTS_HINT,
    LOGIN_HINT,
    PROJECT_HINT,
    UPLOAD_HINT,
    ArenaAPIError,
    ArenaAuthError,
    ArenaConfigError,
    ArenaCreditsError,
    ArenaEnvironmentNotFoundError,
    ArenaError,
    ArenaNetworkError,
    ArenaTimeoutError,
    ArenaTrainingError,
    ArenaValidationError,
)
from agile_arena.packaging import package_environment

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://arena.agilerl.com"
DEFAULT_KEYCLOAK_URL = "https://auth.arena.agilerl.com"
REFRESH_MARGIN_S = 60.0  # refresh an access token that expires sooner than this
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 120.0  # a server asking for a longer wait gets its error shown instead
METRICS_DOWNLOAD_ROWS = 50_000
GENERIC_FAILURE = "Something went wrong. Please try again later."
KEYCLOAK_HINT = "check ARENA_KEYCLOAK_URL and your connection"
DROPPED_HINT = "check your connection; Arena may still have processed the request"

_API = "/api/cli/v1"
USER = "/api/users/current"
CREDITS = "/api/users/credits"
RESOURCES = f"{_API}/resources/list"
PROJECTS = f"{_API}/projects"
PROJECTS_CREATE = f"{_API}/projects/create"
PROJECTS_DELETE = f"{_API}/projects/delete"
ENVIRONMENTS = f"{_API}/environments"
ENVIRONMENTS_EXISTS = f"{_API}/environments/exists"
ENVIRONMENTS_VALIDATE = f"{_API}/environments/validate"
ENVIRONMENTS_CREATE = f"{_API}/environments/create-and-validate"
SUBMIT = f"{_API}/experiments/jobs/submit"
EXPERIMENTS = f"{_API}/experiments/list"
RESUME = f"{_API}/experiments/jobs/resume"
STOP = f"{_API}/experiments/jobs/stop"
CHECKPOINTS = f"{_API}/experiments/jobs/checkpoints"
METRICS = f"{_API}/experiments/metrics"

_DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# Failures after which the server cannot have seen the request, and those where it may have.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError)
_AMBIGUOUS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_INTERNAL_URL = re.compile(r"https?://[^\s/.:]+(?::\d+)?/api/v\d+/", re.IGNORECASE)
_TEXT_KEYS = ("description", "message", "detail", "error")
_NOT_FOUND_KEYS = ("error", "message", "detail", "description")
_NOT_EXTRAS = frozenset({*_TEXT_KEYS, "error_code", "status", "status_code"})
_OVERWRITE_HINT = "choose another --output-file, or delete the file first"
_FILENAME = re.compile(r"""filename\*?=(?:UTF-8'')?"?([^";]+)"?""", re.IGNORECASE)


@dataclass(frozen=True)
class StreamEvent:
    """One line of a streamed progress reply (validation, submission).

    :param kind: ``status``, ``warning``, ``check``, or ``log`` for lines that are not events.
    :param stage: e.g. ``upload``, ``validation``, ``submission``.
    :param status: ``started``, ``running``, ``completed``, ``failed``, ...
    :param message: the human-readable line (the raw text for ``log`` lines).
    :param level: ``info``, ``secondary-info`` or ``error``, when given.
    :param detail: the structured payload, when given.
    :param error: True for a ``failed`` status or warning: the call will raise.
    """

    kind: str
    stage: str
    status: str
    message: str
    level: str | None = None
    detail: dict[str, Any] | None = None
    error: bool = False

    @property
    def extras(self) -> dict[str, Any]:
        """The detail fields worth showing with an error."""
        return {k: v for k, v in (self.detail or {}).items() if k != "error_code" and v}


@dataclass
class _Request:
    method: str
    url: str
    params: Any = None
    json: Any = None
    data: dict[str, str] | None = None
    files: Callable[[], dict[str, Any]] | None = None  # called per send, so files are rewound
    error: type[ArenaAPIError] = ArenaAPIError
    timeout: httpx.Timeout | None = None
    stream: bool = False
    login: bool = False  # a Keycloak request: no bearer token
    headers: dict[str, str] = field(default_factory=dict)
    resend_ambiguous: bool | None = None  # resend when the server may have acted (GET, DELETE)
    before_resend: Callable[[], None] | None = None  # runs before resending after such a failure
    max_retries: int | None = None

    @property
    def idempotent(self) -> bool:
        if self.resend_ambiguous is not None:
            return self.resend_ambiguous
        return self.method in ("GET", "DELETE")


@dataclass(frozen=True)
class ErrorBody:
    detail: str
    extras: dict[str, Any]
    hint: str | None = None
    environment_missing: bool = False


class _Recovered(Exception):  # control flow only: never leaves the client
    """A submission turned out to have been accepted before its resend."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("recovered")
        self.result = result


class ArenaClient:
    """A session with Arena: credentials, one HTTP connection pool, retries.

    Building one sends no request. Credentials, highest precedence first: ``api_key`` (an empty
    string counts as unset), ``ARENA_API_KEY``, the tokens stored by :meth:`login`.

    :param api_key: a personal access token (or any bearer token).
    :param base_url: the API (else ``ARENA_BASE_URL``, else Arena's public URL).
    :param keycloak_url: the login server (else ``ARENA_KEYCLOAK_URL``, else Arena's).
    :param realm: the Keycloak realm.
    :param client_id: the Keycloak client.
    :param request_timeout: seconds allowed per request.
    :param upload_timeout: seconds allowed to send an upload or a streamed request.
    :param credentials_dir: where tokens and config live (default ``~/.arena``).
    :param max_retries: resends allowed per request.
    :param backoff: base delay of the exponential backoff, in seconds.
    :param transport: an httpx transport (tests use ``httpx.MockTransport``).
    :param sleep: how to wait between retries and login polls.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        keycloak_url: str | None = None,
        realm: str = "arena",
        client_id: str = "arena-cli",
        request_timeout: float = 30.0,
        upload_timeout: float = 300.0,
        credentials_dir: Path | None = None,
        max_retries: int = 4,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = _url(base_url, "ARENA_BASE_URL", DEFAULT_BASE_URL)
        self.keycloak_url = _url(keycloak_url, "ARENA_KEYCLOAK_URL", DEFAULT_KEYCLOAK_URL)
        self.realm = realm
        self.client_id = client_id
        self._credentials_dir = credentials_dir
        self._max_retries = max(0, max_retries)
        self._backoff = backoff
        self._sleep = sleep
        self._timeout = httpx.Timeout(request_timeout)
        self._stream_timeout = httpx.Timeout(upload_timeout, read=None)
        self._secrets: set[str] = set()
        self._api_key = self._secret(api_key or os.environ.get("ARENA_API_KEY") or None)
        tokens = credentials.load_tokens(credentials_dir) or {}
        self._access_token = self._secret(_string(tokens.get("access_token")))
        self._refresh_token = self._secret(_string(tokens.get("refresh_token")))
        self._refresh_rejected = False
        self._http = httpx.Client(transport=transport, follow_redirects=True, timeout=self._timeout)

    # -- the session ------------------------------------------------------------------------

    @property
    def is_authenticated(self) -> bool:
        """Whether a credential is at hand (not whether Arena will accept it)."""
        return bool(self._api_key or self._access_token)

    @property
    def uses_api_key(self) -> bool:
        return bool(self._api_key)

    def __repr__(self) -> str:
        auth = "api key" if self._api_key else "login" if self._access_token else "none"
        return f"ArenaClient(base_url={self.base_url!r}, auth={auth!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ArenaClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def login(
        self,
        *,
        timeout: float = 300,
        force: bool = False,
        notify: Callable[[str], None] = print,
        open_browser: bool = True,
    ) -> None:
        """Log in with the OAuth device flow (a code confirmed in the browser), unless not needed.

        With an API key, or a stored session that is still valid or can be refreshed, nothing is
        asked of the user unless ``force``. The tokens are saved in the credentials folder.

        :param timeout: seconds to wait for the user to confirm the code.
        :param force: log in again whatever credentials exist (an API key is then ignored).
        :param notify: shows the user where to go and which code to enter.
        :param open_browser: also open the page, when this machine has a browser.
        """
        if self._api_key and not force:
            notify("An API key is in use, so no login is needed (pass --force to log in anyway).")
            return
        self._api_key = None
        remaining = _expires_in(self._access_token)
        if not force and remaining is not None and remaining > REFRESH_MARGIN_S:
            notify("Already logged in to Arena (pass --force to log in again).")
            return
        if not force and self._refresh_token and self._try_refresh():
            notify("Refreshed the stored Arena session.")
            return
        self._device_flow(timeout, notify, open_browser)

    def logout(self) -> None:
        """End the session on the login server (best effort) and delete the stored tokens."""
        if self._refresh_token:
            form = {"client_id": self.client_id, "refresh_token": self._refresh_token}
            with contextlib.suppress(ArenaError):
                self._send(
                    _Request("POST", self._oidc("logout"), data=form, login=True, max_retries=0)
                )
        try:
            credentials.delete_tokens(self._credentials_dir)
        except OSError as error:
            raise ArenaConfigError(f"Could not delete the stored Arena login: {error}") from None
        self._access_token = self._refresh_token = None

    # -- user, resources, projects ---------------------------------------------------------

    def get_current_user(self) -> dict[str, Any]:
        return self._expect(self._get(USER), dict, "user profile")

    def get_user_credits(self) -> Any:
        return self._get(CREDITS)

    def list_resources(self) -> dict[str, Any]:
        """The resource tiers: ``{"tiers": {key: {"name", "num_gpus", ...}}}``."""
        return self._expect(self._get(RESOURCES), dict, "resource list")

    def list_projects(self) -> list[dict[str, Any]]:
        """Every project, each with at least ``name``, ``type`` and ``description``."""
        rows = self._expect(self._get(PROJECTS) or [], list, "project list")
        return [
            {
                "name": row.get("name"),
                "type": row.get("type"),
                "description": row.get("description"),
                **row,
            }
            for row in rows
            if isinstance(row, dict)
        ]

    def create_project(
        self, name: str, description: str | None = None, llm_based: bool = False
    ) -> Any:
        body = {"name": name, "description": description, "llm_based": llm_based}
        return self._json("POST", PROJECTS_CREATE, body)

    def delete_project(self, name: str) -> Any:
        return self._json("DELETE", PROJECTS_DELETE, {"name": name})

    def set_default_project(self, name: str) -> None:
        """Store ``name`` as the default project, after checking that it exists."""
        names = [str(project["name"]) for project in self.list_projects()]
        if name not in names:
            hint = (
                f"available projects: {', '.join(names)}"
                if names
                else "create one with `agile arena projects create NAME`"
            )
            raise ArenaConfigError(f"Project '{name}' not found.", hint)
        try:
            credentials.save_default_project(name, self._credentials_dir)
        except OSError as error:
            raise ArenaConfigError(f"Could not save the default project: {error}") from None

    def get_default_project(self) -> str | None:
        """The stored default project (no request is sent)."""
        return credentials.default_project(self._credentials_dir)

    def resolve_project(self, project: str | None) -> str:
        """``project``, else the default project; ArenaConfigError when there is neither."""
        resolved = self._project_or_default(project)
        if not resolved:
            raise ArenaConfigError("No project specified.", PROJECT_HINT)
        return resolved

    # -- environments ------------------------------------------------------------------------

    def list_environments(self, name: str | None = None, include_arena: bool = False) -> dict:
        """The catalogue ``{environment: {version: {"validated", "profiled"}}}``."""
        params = {"name": name or "", "include_arena": _flag(include_arena)}
        return self._expect(self._get(ENVIRONMENTS, params), dict, "environment list")

    def environment_exists(self, name: str, version: str | None = None) -> bool:
        reply = self._get(ENVIRONMENTS_EXISTS, {"name": name, "version": version or ""})
        return bool(reply.get("exists")) if isinstance(reply, dict) else reply is True

    def validate_environment(
        self,
        name: str,
        *,
        version: str | None = None,
        source: Path | None = None,
        env_config: Path | None = None,
        requirements: Path | None = None,
        entrypoint: str | None = None,
        description: str | None = None,
        multi_agent: bool = False,
        do_rollouts: bool = False,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> dict[str, Any]:
        """Validate a registered environment, or with ``source`` upload one and validate it.

        :param version: the version to validate (default latest), or to create (default ``v1``).
        :param source: a directory, an archive or a single file to upload.
        :param env_config: constructor keyword arguments to upload with ``source``.
        :param requirements: a requirements file to upload with ``source``.
        :param entrypoint: ``module:Class`` when the source holds several environments.
        :param description: stored with an uploaded environment.
        :param multi_agent: the environment is a PettingZoo ``ParallelEnv``.
        :param do_rollouts: also run random episodes.
        :param on_event: called with each progress event.
        :returns: the final validation report.
        """
        if source is None:
            body: dict[str, Any] = {"name": name, "version": version, "do_rollouts": do_rollouts}
            if entrypoint:
                body["entrypoint"] = entrypoint
            request = self._streamed(ENVIRONMENTS_VALIDATE, ArenaValidationError, json=body)
            return self._stream_result(request, on_event)
        fields = {
            "name": name,
            "version": version or "v1",
            "multi_agent": _flag(multi_agent),
            "language_based": "false",
            "do_rollouts": _flag(do_rollouts),
        }
        fields.update(
            {k: v for k, v in (("entrypoint", entrypoint), ("description", description)) if v}
        )
        with package_environment(source, env_config=env_config, requirements=requirements) as pkg:
            request = self._streamed(
                ENVIRONMENTS_CREATE, ArenaValidationError, data=fields, files=pkg.files
            )
            return self._stream_result(request, on_event)

    # -- experiments -------------------------------------------------------------------------

    def submit_experiment(
        self,
        manifest: dict[str, Any],
        *,
        resource_id: str | None = None,
        num_nodes: int | None = None,
        project: str | None = None,
        experiment_name: str | None = None,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> dict[str, Any]:
        """Submit a training job; returns Arena's acceptance, e.g. ``{"accepted": True, ...}``.

        Resent safely after network failures (see the module docstring); a result with
        ``"recovered": True`` means the first send had worked.

        :param manifest: the Arena manifest payload.
        :param resource_id: the resource tier (``None``: Arena decides).
        :param num_nodes: how many nodes (``None``: Arena decides).
        :param project: the project (default: the stored default project).
        :param experiment_name: the experiment's name (default: Arena picks one).
        :param on_event: called with each progress event.
        """
        project = self._project_or_default(project)
        body = {
            "manifest": manifest,
            "resource_id": resource_id,
            "num_nodes": num_nodes,
            "project": project,
            "experiment_name": experiment_name,
        }
        request = self._streamed(SUBMIT, ArenaTrainingError, json=body)
        request.headers["Idempotency-Key"] = str(uuid.uuid4())
        request.resend_ambiguous = True
        if experiment_name and project:
            request.before_resend = self._recovery_check(project, experiment_name)
        try:
            return self._stream_result(request, on_event)
        except _Recovered as recovered:
            return recovered.result
        except ArenaEnvironmentNotFoundError as error:
            environment = manifest.get("environment")
            name = environment.get("name") if isinstance(environment, dict) else None
            if name and error.hint == error.default_hint:
                error.hint = f"{ENVIRONMENTS_HINT}, or {UPLOAD_HINT.format(name=name)}"
            raise

    def list_experiments(self, project: str | None = None) -> list[dict[str, Any]]:
        """The experiments of ``project`` (default: the stored default project)."""
        params = {"project": self.resolve_project(project)}
        return self._expect(self._get(EXPERIMENTS, params) or [], list, "experiment list")

    def stop_experiment(self, name: str) -> Any:
        return self._json("POST", STOP, {"experiment_name": name.strip()})

    def resume_experiment(self, name: str, max_steps: int) -> Any:
        return self._json("POST", RESUME, {"experiment_name": name, "max_steps": int(max_steps)})

    def list_checkpoints(self, name: str) -> list[dict[str, Any]]:
        reply = self._get(CHECKPOINTS, {"experiment_name": name})
        return self._expect(reply or [], list, "checkpoint list")

    def list_metric_names(self, name: str, project: str | None = None) -> list[str]:
        params = {"experiment_name": name}
        resolved = self._project_or_default(project)
        if resolved:
            params["project"] = resolved
        reply = self._get(METRICS, params)
        names = reply.get("metrics") if isinstance(reply, dict) else reply
        return [str(item) for item in self._expect(names or [], list, "metric list")]

    def metrics_csv(
        self,
        name: str,
        *,
        preview_rows: int,
        metrics: list[str] | None = None,
        project: str | None = None,
    ) -> tuple[bytes, str, str | None]:
        """The first ``preview_rows`` rows of an experiment's metrics.

        :returns: the body, its Content-Type and its Content-Disposition (if any).
        """
        params = [("experiment_name", name), ("preview_rows", str(int(preview_rows)))]
        resolved = self._project_or_default(project)
        if resolved:
            params.append(("project", resolved))
        params.extend(("metric", metric) for metric in metrics or [])
        response = self._call(_Request("GET", self._api(METRICS), params=params))
        headers = response.headers
        return response.content, headers.get("content-type", ""), headers.get("content-disposition")

    def download_metrics(
        self,
        name: str,
        output: Path | None = None,
        *,
        metrics: list[str] | None = None,
        project: str | None = None,
    ) -> Path:
        """Save an experiment's metrics as CSV; never overwrites a file.

        :param output: the file to write, or a folder to write into (default:
            ``NAME_metrics.csv`` here; in a folder, the name Arena suggests).
        :returns: the path written.
        """
        default_name = f"{name.replace('/', '_').replace(os.sep, '_')}_metrics.csv"
        target = Path(output) if output is not None else Path(default_name)
        into_folder = target.is_dir()
        if not into_folder:
            _check_target(target)
        body, content_type, disposition = self.metrics_csv(
            name, preview_rows=METRICS_DOWNLOAD_ROWS, metrics=metrics, project=project
        )
        if not content_type.lower().startswith("text/csv"):
            text = self._redact(body[:500].decode("utf-8", "replace")) or "(empty reply)"
            raise ArenaAPIError(f"Arena did not send CSV metrics: {text}")
        if into_folder:
            target = target / (_suggested_name(disposition) or default_name)
            _check_target(target)
        return _write_new(target, body)

    # -- requests ----------------------------------------------------------------------------

    def _api(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _oidc(self, endpoint: str) -> str:
        return f"{self.keycloak_url}/realms/{self.realm}/protocol/openid-connect/{endpoint}"

    def _get(self, path: str, params: Any = None) -> Any:
        return _payload(self._call(_Request("GET", self._api(path), params=params)))

    def _json(self, method: str, path: str, body: Any) -> Any:
        return _payload(self._call(_Request(method, self._api(path), json=body)))

    def _streamed(self, path: str, error: type[ArenaAPIError], **body: Any) -> _Request:
        return _Request(
            "POST", self._api(path), error=error, stream=True, timeout=self._stream_timeout, **body
        )

    def _call(self, request: _Request) -> httpx.Response:
        """Send an API request; a successful response (still open when ``stream``)."""
        self._refresh_if_expiring()
        response = self._send(request)
        if response.status_code == 401:
            response.close()
            self._recover_from_401()
            response = self._send(request)
            if response.status_code == 401:
                response.close()
                raise self._unauthorized()
        if not response.is_success:
            raise self._http_error(request, response)
        return response

    def _send(self, request: _Request) -> httpx.Response:
        """Send with retries; the last response, whatever its status."""
        attempt = 0
        while True:
            outcome = self._attempt(request)
            delay, ambiguous = self._retry_plan(request, outcome, attempt)
            if delay is None:
                if isinstance(outcome, httpx.Response):
                    return outcome
                raise self._network_error(request, outcome, attempt + 1)
            if isinstance(outcome, httpx.Response):
                outcome.close()
            log.debug(
                "%s %s failed (%s); retrying in %.2f s",
                request.method,
                httpx.URL(request.url).path,
                _reason(outcome),
                delay,
            )
            self._sleep(delay)
            attempt += 1
            if ambiguous and request.before_resend is not None:
                request.before_resend()

    def _attempt(self, request: _Request) -> httpx.Response | httpx.RequestError:
        built = self._http.build_request(
            request.method,
            request.url,
            params=request.params,
            json=request.json,
            data=request.data,
            files=request.files() if request.files else None,
            headers=self._headers(request),
            timeout=request.timeout or self._timeout,
        )
        try:
            response = self._http.send(built, stream=True)
        except httpx.RequestError as error:
            return error
        if request.stream:
            return response
        try:
            response.read()
        except httpx.RequestError as error:
            response.close()
            return error
        return response

    def _retry_plan(
        self, request: _Request, outcome: httpx.Response | httpx.RequestError, attempt: int
    ) -> tuple[float | None, bool]:
        """How long to wait before resending (None: don't), and whether Arena may have acted."""
        limit = self._max_retries if request.max_retries is None else request.max_retries
        if attempt >= limit:
            return None, False
        if isinstance(outcome, httpx.Response):
            status = outcome.status_code
            if status in (429, 503):  # refused before any processing
                return self._server_delay(outcome, attempt), False
            if request.idempotent and status >= 500:
                return self._server_delay(outcome, attempt), True
            return None, False
        if isinstance(outcome, _NOT_SENT):
            return self._backoff_delay(attempt), False
        if request.idempotent and isinstance(outcome, _AMBIGUOUS):
            return self._backoff_delay(attempt), True
        return None, False

    def _backoff_delay(self, attempt: int) -> float:
        return min(MAX_BACKOFF_S, self._backoff * 2**attempt) * random.random()

    def _server_delay(self, response: httpx.Response, attempt: int) -> float | None:
        wait = _retry_after(response)
        if wait is None:
            return self._backoff_delay(attempt)
        return wait if wait <= MAX_RETRY_AFTER_S else None

    def _headers(self, request: _Request) -> dict[str, str]:
        headers = dict(request.headers)
        if not request.login:
            token = self._api_key or self._access_token
            if not token:
                raise ArenaAuthError(
                    "Not logged in to Arena",
                    "run `agile login`, or pass --api-key / set ARENA_API_KEY",
                )
            headers["Authorization"] = f"Bearer {token}"
        return headers

    # -- streams -----------------------------------------------------------------------------

    def _stream_result(
        self, request: _Request, on_event: Callable[[StreamEvent], None] | None
    ) -> dict[str, Any]:
        """Read an NDJSON progress stream; the final report, or the first failure raised."""
        response = self._call(request)
        lines: list[str] = []
        failure: StreamEvent | None = None
        result: dict[str, Any] | None = None
        try:
            for event in _events(response.iter_lines(), lines):
                if on_event is not None:
                    on_event(event)
                if event.error:
                    failure = failure or event
                elif event.status == "completed" and event.kind != "check" and event.detail:
                    result = event.detail
        except httpx.RequestError as error:
            host = httpx.URL(request.url).host
            raise ArenaNetworkError(
                f"the connection to {host} dropped before Arena finished replying "
                f"({self._redact(_reason(error))})",
                hint=DROPPED_HINT,
            ) from None
        finally:
            response.close()
        if failure is not None:
            body = ErrorBody(
                failure.message or "Arena reported a failure",
                failure.extras,
                _entrypoint_hint(failure.detail or {}),
                _mentions_missing_environment(failure.message),
            )
            raise self._api_error(request.error, body, 0)
        return result if result is not None else _whole_body(lines)

    # -- errors --------------------------------------------------------------------------------

    def _http_error(self, request: _Request, response: httpx.Response) -> ArenaAPIError:
        try:
            response.read()
            text = response.text
        except httpx.HTTPError:
            text = ""
        finally:
            response.close()
        return self._api_error(request.error, parse_error_body(text), response.status_code)

    def _api_error(self, kind: type[ArenaAPIError], body: ErrorBody, status: int) -> ArenaAPIError:
        detail = self._redact(body.detail)
        if kind is ArenaTrainingError and body.environment_missing:
            kind = ArenaEnvironmentNotFoundError
        if status == 402 or "credits" in detail.lower():
            kind = ArenaCreditsError
        hint = body.hint
        if hint is None and kind.default_hint is None:
            hint = ENVIRONMENTS_HINT if body.environment_missing else _status_hint(status)
        return kind(detail, status_code=status, extras=self._redact(body.extras), hint=hint)

    def _network_error(
        self, request: _Request, error: httpx.RequestError, attempts: int
    ) -> ArenaNetworkError:
        host = httpx.URL(request.url).host
        if isinstance(error, _NOT_SENT):
            what = f"could not connect to {host}"
        elif isinstance(error, httpx.TimeoutException):
            what = f"{host} did not answer in time"
        else:
            what = f"the connection to {host} failed"
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        hint = KEYCLOAK_HINT if request.login else None
        return ArenaNetworkError(f"{what}{tries} ({self._redact(_reason(error))})", hint=hint)

    def _unauthorized(self) -> ArenaAuthError:
        if self._api_key:
            return ArenaAuthError("Arena rejected the API key", API_KEY_HINT)
        return ArenaAuthError("Your Arena session has expired", LOGIN_HINT)

    def _secret(self, value: str | None) -> str | None:
        if value:
            self._secrets.add(value)
        return value

    def _redact(self, value: Any) -> Any:
        """``value`` with every credential this client knows replaced by ``[redacted]``."""
        if isinstance(value, str):
            for secret in self._secrets:
                value = value.replace(secret, "[redacted]")
            return value
        if isinstance(value, dict):
            return {key: self._redact(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self._redact(item) for item in value]
        return value

    # -- tokens --------------------------------------------------------------------------------

    def _refresh_if_expiring(self) -> None:
        """Refresh a stored access token that expires within a minute (failures wait for a 401)."""
        if self._api_key or not self._refresh_token or self._refresh_rejected:
            return
        remaining = _expires_in(self._access_token)
        if remaining is None or remaining > REFRESH_MARGIN_S:  # unknown expiry: wait for a 401
            return
        with contextlib.suppress(ArenaError):
            self._refresh()

    def _recover_from_401(self) -> None:
        if self._api_key or not self._refresh_token or self._refresh_rejected:
            raise self._unauthorized()
        self._refresh()

    def _try_refresh(self) -> bool:
        try:
            self._refresh()
        except ArenaAuthError:
            return False
        return True

    def _refresh(self) -> None:
        form = {
            "grant_type": "refresh_token",
            "refresh_token": self._refresh_token or "",
            "client_id": self.client_id,
        }
        response = self._send(_Request("POST", self._oidc("token"), data=form, login=True))
        if response.status_code in (400, 401):
            self._refresh_rejected = True
            raise ArenaAuthError("Your Arena session has expired", LOGIN_HINT)
        if not response.is_success:
            raise ArenaAuthError(
                f"Could not refresh the Arena session (login server answered "
                f"{response.status_code})",
                "try again later, or run `agile login`",
            )
        self._store_tokens(_token_reply(response))

    def _store_tokens(self, tokens: dict[str, Any]) -> None:
        self._access_token = self._secret(tokens["access_token"])
        self._refresh_token = self._secret(_string(tokens.get("refresh_token"))) or (
            self._refresh_token
        )
        self._refresh_rejected = False
        try:
            credentials.save_tokens(tokens, self._credentials_dir)
        except OSError as error:
            folder = credentials.arena_dir(self._credentials_dir)
            raise ArenaConfigError(
                f"Could not save the Arena login in {folder}: {error.strerror or error}",
                f"check the permissions of {folder}",
            ) from None

    def _device_flow(self, timeout: float, notify: Callable[[str], None], browser: bool) -> None:
        start = self._start_device_flow()
        url = str(start.get("verification_uri_complete") or start.get("verification_uri") or "")
        code = start.get("user_code")
        notify(f"Open {url} and enter the code {code}" if code else f"Open {url} to log in")
        if browser and url:
            _open_browser(url)
        interval = _seconds(start.get("interval"), 5.0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._sleep(interval)
            reply = self._poll_device(str(start["device_code"]))
            if isinstance(reply, dict):
                self._store_tokens(reply)
                return
            if reply == "slow_down":
                interval += 5
        raise ArenaTimeoutError(
            f"Login timed out after {timeout:g} s without authorization", "run `agile login` again"
        )

    def _start_device_flow(self) -> dict[str, Any]:
        form = {"client_id": self.client_id, "scope": "openid profile email"}
        response = self._send(_Request("POST", self._oidc("auth/device"), data=form, login=True))
        reply = _json_or_none(response)
        if response.is_success and isinstance(reply, dict) and reply.get("device_code"):
            return reply
        raise ArenaAuthError(
            f"Could not start the Arena login ({self._redact(_oauth_reason(response, reply))})",
            KEYCLOAK_HINT,
        )

    def _poll_device(self, device_code: str) -> dict[str, Any] | str:
        """The tokens, or ``authorization_pending`` / ``slow_down``; raises on anything else."""
        form = {
            "grant_type": _DEVICE_GRANT,
            "device_code": device_code,
            "client_id": self.client_id,
        }
        response = self._send(_Request("POST", self._oidc("token"), data=form, login=True))
        if response.is_success:
            return _token_reply(response)
        reply = _json_or_none(response)
        error = str(reply.get("error", "")) if isinstance(reply, dict) else ""
        if error in ("authorization_pending", "slow_down"):
            return error
        if error == "expired_token":
            raise ArenaTimeoutError(
                "The login code expired before it was confirmed", "run `agile login` again"
            )
        reason = self._redact(_oauth_reason(response, reply))
        raise ArenaAuthError(f"Arena login failed ({reason})", "run `agile login` again")

    def _recovery_check(self, project: str, name: str) -> Callable[[], None]:
        """Before resending a submission: stop if the experiment appeared meanwhile."""
        before = self._count_experiments(project, name) or 0

        def check() -> None:
            now = self._count_experiments(project, name)
            if now is not None and now > before:
                log.debug("experiment %r exists: the submission had been accepted", name)
                raise _Recovered({"accepted": True, "experiment_name": name, "recovered": True})

        return check

    def _count_experiments(self, project: str, name: str) -> int | None:
        try:
            rows = self.list_experiments(project)
        except ArenaError:
            return None
        names = (
            (row.get("name"), row.get("experiment_name")) for row in rows if isinstance(row, dict)
        )
        return sum(1 for pair in names if name in pair)

    def _project_or_default(self, project: str | None) -> str | None:
        return (project or "").strip() or self.get_default_project()

    def _expect(self, value: Any, kind: type, what: str) -> Any:
        if isinstance(value, kind):
            return value
        shown = self._redact(json.dumps(value, default=str)[:200])
        raise ArenaAPIError(f"Arena sent an unexpected {what}: {shown}")


# -- wire format ---------------------------------------------------------------------------------


def parse_error_body(text: str) -> ErrorBody:
    """What an error reply says (§5.3 of the reference): detail, extras, hint."""
    if not text.strip():
        return ErrorBody("No error details", {})
    body = _error_object(text)
    if body is None:
        return ErrorBody(scrub_internal_urls(text[:500]), {})
    body = _unnest(body)
    detail = _first_text(body, _TEXT_KEYS)
    extras = {key: value for key, value in body.items() if key not in _NOT_EXTRAS and value}
    return ErrorBody(
        scrub_internal_urls(detail or text[:500]),
        extras,
        _entrypoint_hint(body),
        _mentions_missing_environment(_first_text(body, _NOT_FOUND_KEYS)),
    )


def parse_event(line: str) -> StreamEvent:
    """One NDJSON line as an event; anything that is not an event object is a ``log`` line."""
    try:
        value = json.loads(line)
    except ValueError:
        value = None
    if not isinstance(value, dict) or value.get("kind") not in ("status", "warning", "check"):
        return StreamEvent(kind="log", stage="", status="", message=line)
    kind = str(value["kind"])
    status = _text(value.get("status"))
    failed = kind != "check" and status == "failed"
    message = _text(value.get("message"))
    detail = value.get("detail")
    level = value.get("level")
    return StreamEvent(
        kind=kind,
        stage=_text(value.get("stage")),
        status=status,
        message=scrub_internal_urls(message) if failed else message,
        level=level if isinstance(level, str) else None,
        detail=detail if isinstance(detail, dict) else None,
        error=failed,
    )


def scrub_internal_urls(message: str) -> str:
    """A generic message instead of one that shows an internal service URL."""
    return GENERIC_FAILURE if _INTERNAL_URL.search(message) else message


def _events(raw_lines: Iterable[str], seen: list[str]) -> Iterable[StreamEvent]:
    for raw in raw_lines:
        seen.append(raw)
        line = raw.strip()
        if line:
            yield parse_event(line)


def _whole_body(lines: list[str]) -> dict[str, Any]:
    """The result of a stream without a completed event: the body, if it is one JSON object."""
    try:
        value = json.loads("\n".join(lines))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _payload(response: httpx.Response) -> Any:
    """A 2xx reply's content: JSON (unwrapped from ``{"ok": true, "data": ...}``) or text."""
    if not response.headers.get("content-type", "").lower().startswith("application/json"):
        return response.text
    try:
        value = response.json()
    except ValueError:
        return response.text
    if isinstance(value, dict) and value.get("ok") is True and "data" in value:
        return value["data"]
    return value


def _error_object(text: str) -> dict[str, Any] | None:
    for candidate in (text, text.replace("\n", " ")):
        value = _json_value(candidate)
        if isinstance(value, dict):
            return value
    for line in text.splitlines():
        value = _json_value(line)
        if isinstance(value, dict) and "error" in value:
            return value
    return None


def _unnest(body: dict[str, Any]) -> dict[str, Any]:
    """The inner object when a message field holds a JSON-encoded error (one level)."""
    for key in _TEXT_KEYS:
        value = body.get(key)
        inner = _json_value(value) if isinstance(value, str) else None
        if isinstance(inner, dict) and any(k in inner for k in _TEXT_KEYS):
            return inner
    return body


def _first_text(body: dict[str, Any], keys: Iterable[str]) -> str:
    return next((body[k] for k in keys if isinstance(body.get(k), str) and body[k].strip()), "")


def _entrypoint_hint(body: dict[str, Any]) -> str | None:
    if body.get("error_code") != "AMBIGUOUS_ENTRYPOINT":
        return None
    choices = body.get("available_entrypoints")
    first = choices[0] if isinstance(choices, list) and choices else "MODULE:CLASS"
    return f"retry with --entrypoint {first}"


def _mentions_missing_environment(text: str) -> bool:
    lowered = text.lower()
    return "not found" in lowered and "environment" in lowered


def _status_hint(status: int) -> str | None:
    if status == 403:
        return "your account is not allowed to do this; check the project and your plan"
    if status == 429:
        return "Arena is limiting requests; wait a minute and try again"
    if status >= 500:
        return "Arena had an internal problem; try again later"
    return None


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), if the reply has one."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - time.time())


def _reason(outcome: httpx.Response | httpx.RequestError) -> str:
    if isinstance(outcome, httpx.Response):
        return f"HTTP {outcome.status_code}"
    text = str(outcome)
    return f"{type(outcome).__name__}: {text}" if text else type(outcome).__name__


def _token_reply(response: httpx.Response) -> dict[str, Any]:
    reply = _json_or_none(response)
    if isinstance(reply, dict) and isinstance(reply.get("access_token"), str):
        return reply
    raise ArenaAuthError("Arena's login server sent no access token", "run `agile login` again")


def _oauth_reason(response: httpx.Response, reply: Any) -> str:
    if isinstance(reply, dict):
        text = reply.get("error_description") or reply.get("error")
        if text:
            return str(text)
    return f"HTTP {response.status_code}"


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _open_browser(url: str) -> None:
    """Open ``url`` when this machine has a browser to show it; never fails."""
    if os.environ.get("AGILE_NO_BROWSER"):
        return
    has_display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if sys.platform.startswith("linux") and not has_display:
        return
    with contextlib.suppress(Exception):
        webbrowser.open(url)


def _expires_in(token: str | None) -> float | None:
    """Seconds until a JWT expires; None when unknown (not a JWT, no ``exp``)."""
    expiry = credentials.jwt_expiry(token)
    return expiry - time.time() if expiry is not None else None


def _check_target(path: Path) -> None:
    if path.exists():
        raise ArenaConfigError(f"{path} already exists", _OVERWRITE_HINT)
    if path.parent.exists() and not path.parent.is_dir():
        raise ArenaConfigError(f"{path.parent} is not a directory", "choose another --output-file")


def _write_new(path: Path, content: bytes) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("xb") as stream:
            stream.write(content)
    except FileExistsError:
        raise ArenaConfigError(f"{path} already exists", _OVERWRITE_HINT) from None
    except OSError as error:
        raise ArenaConfigError(f"Could not write {path}: {error.strerror or error}") from None
    return path


def _suggested_name(disposition: str | None) -> str | None:
    """The file name of a Content-Disposition header, without any folder part."""
    match = _FILENAME.search(disposition or "")
    name = Path(match.group(1).strip()).name if match else ""
    return name if name not in ("", ".", "..") else None


def _url(value: str | None, variable: str, default: str) -> str:
    url = (value or os.environ.get(variable) or default).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ArenaConfigError(
            f"Invalid URL {url!r}", f"use an http:// or https:// URL (check {variable})"
        )
    return url


def _seconds(value: Any, default: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return default
    return seconds if seconds > 0 else default


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _text(value: Any) -> str:
    return "" if value is None else str(value)
