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
* Every wait is bounded, however slowly the server sends. Each attempt has one deadline, from
  connecting to the last byte of the reply: ``request_timeout``, or ``upload_timeout`` for
  uploads and streamed requests (to the last progress line). All attempts of one call, the
  waits between them and what runs before a resend (a token refresh, the check for a
  submission that went through) end within :data:`CALL_BUDGET_TIMEOUTS` times that timeout.
  A ``Retry-After`` that does not end within what is left of it is not waited for: the error
  says how long Arena asked to wait. A wait longer than :data:`NOTICE_AFTER_S` is announced.
* Replies are read up to a cap, JSON nested deeper than ``parsing.MAX_JSON_DEPTH`` is refused,
  and redirects are followed only on the origin the request was sent to: a credential never
  leaves it.
* Whatever is returned or shown has the credentials the client knows redacted, and fields that
  look like credentials (``api_key``, ``token``, ``secret``, ...) masked.

Reading replies is left to :mod:`agile_arena.parsing` and credentials to :mod:`agile_arena.auth`;
the names callers used to import from here (``StreamEvent``, ``parse_event``,
``parse_error_body``, ``ErrorBody``, ``scrub_internal_urls``, ``GENERIC_FAILURE``,
``REFRESH_MARGIN_S``) still can be.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import logging
import os
import random
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import Any

import httpx

from agile_arena import credentials, wire
from agile_arena.auth import KEYCLOAK_HINT, Authenticator, Secrets
from agile_arena.auth import REFRESH_MARGIN_S as REFRESH_MARGIN_S
from agile_arena.errors import (
    ENVIRONMENTS_HINT,
    PROJECT_HINT,
    UPLOAD_HINT,
    ArenaAPIError,
    ArenaConfigError,
    ArenaCreditsError,
    ArenaEnvironmentNotFoundError,
    ArenaError,
    ArenaNetworkError,
    ArenaRedirectError,
    ArenaReplyError,
    ArenaTrainingError,
    ArenaValidationError,
    clip,
)
from agile_arena.packaging import package_environment
from agile_arena.parsing import GENERIC_FAILURE as GENERIC_FAILURE
from agile_arena.parsing import (
    ErrorBody,
    ReplyShapeError,
    StreamEvent,
    TooDeep,
    an_object,
    environment_catalogue,
    events,
    failure_body,
    load_json,
    metric_names,
    object_rows,
    parse_error_body,
    project_rows,
    resource_tiers,
    whole_body,
)
from agile_arena.parsing import parse_event as parse_event
from agile_arena.parsing import scrub_internal_urls as scrub_internal_urls
from agile_cli.helpers import printable

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://arena.agilerl.com"
DEFAULT_KEYCLOAK_URL = "https://auth.arena.agilerl.com"
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 120.0  # a server asking for a longer wait gets its error shown instead
CALL_BUDGET_TIMEOUTS = 3  # all attempts of a call end within this many times its timeout
NOTICE_AFTER_S = 2.0  # a longer wait before a retry is announced
METRICS_DOWNLOAD_ROWS = 50_000
MAX_REWARD_BYTES = 1024 * 1024  # of a reward file sent with a submission
MAX_REDIRECTS = 5
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

# Failures after which the server cannot have seen the request, and those where it may have.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError)
_AMBIGUOUS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_OVERWRITE_HINT = "choose another --output-file, or delete the file first"
_FILENAME = re.compile(r"""filename\*?=(?:UTF-8'')?"?([^";]+)"?""", re.IGNORECASE)


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
    max_bytes: int | None = None  # what is read of a reply (default: wire.MAX_REPLY_BYTES)
    resend_ambiguous: bool | None = None  # resend when the server may have acted (GET, DELETE)
    before_resend: Callable[[], None] | None = None  # runs before resending after such a failure
    max_retries: int | None = None
    body_deadline: float | None = None  # when the open stream's attempt ends (monotonic)

    @property
    def idempotent(self) -> bool:
        if self.resend_ambiguous is not None:
            return self.resend_ambiguous
        return self.method in ("GET", "DELETE")

    @property
    def what(self) -> str:
        """``METHOD /path``, as errors name the request."""
        return f"{self.method} {httpx.URL(self.url).path}"


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
    :param request_timeout: seconds allowed per attempt of a request, from connecting to the
        last byte of the reply; all attempts of one request, with the waits between them, end
        within :data:`CALL_BUDGET_TIMEOUTS` times this.
    :param upload_timeout: the same for uploads and streamed requests (validation,
        submission), up to the last line of their progress stream.
    :param credentials_dir: where tokens and config live (default ``~/.arena``).
    :param max_retries: resends allowed per request (fewer when its time runs out first).
    :param backoff: base delay of the exponential backoff, in seconds.
    :param transport: an httpx transport (tests use ``httpx.MockTransport``).
    :param sleep: how to wait between retries and login polls.
    :param notify: shows a line about a long wait (default: stderr).
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
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.base_url = _url(base_url, "ARENA_BASE_URL", DEFAULT_BASE_URL)
        self.keycloak_url = _url(keycloak_url, "ARENA_KEYCLOAK_URL", DEFAULT_KEYCLOAK_URL)
        self.realm = realm
        self._credentials_dir = credentials_dir
        self._max_retries = max(0, max_retries)
        self._backoff = backoff
        self._sleep = sleep
        self._notify = notify or _to_stderr
        self._request_timeout = request_timeout
        self._upload_timeout = upload_timeout
        self._timeout = httpx.Timeout(request_timeout)
        self._stream_timeout = httpx.Timeout(upload_timeout, read=None)
        self._secrets = Secrets()
        self._auth = Authenticator(
            api_key=api_key,
            client_id=client_id,
            credentials_dir=credentials_dir,
            post=self._post_login,
            sleep=sleep,
            secrets=self._secrets,
        )
        # Redirects are followed by _follow, which keeps every request on its origin.
        self._http = httpx.Client(
            transport=transport, follow_redirects=False, timeout=self._timeout
        )
        wire.bound_by_deadlines(self._http)

    # -- the session ------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """The Keycloak client."""
        return self._auth.client_id

    @client_id.setter
    def client_id(self, value: str) -> None:
        self._auth.client_id = value

    @property
    def is_authenticated(self) -> bool:
        """Whether a credential is at hand (not whether Arena will accept it)."""
        return self._auth.is_authenticated

    @property
    def uses_api_key(self) -> bool:
        return self._auth.uses_api_key

    def __repr__(self) -> str:
        return f"ArenaClient(base_url={self.base_url!r}, auth={self._auth.mode!r})"

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
        self._auth.login(timeout=timeout, force=force, notify=notify, open_browser=open_browser)

    def logout(self) -> None:
        """End the session on the login server (best effort) and delete the stored tokens."""
        self._auth.logout()

    # -- user, resources, projects ---------------------------------------------------------

    def get_current_user(self) -> dict[str, Any]:
        return self._get(USER, shape=an_object)

    def get_user_credits(self) -> Any:
        return self._get(CREDITS)

    def list_resources(self) -> dict[str, Any]:
        """The resource tiers: ``{"tiers": {key: {"name", "num_gpus", ...}}}``."""
        return self._get(RESOURCES, shape=resource_tiers)

    def list_projects(self) -> list[dict[str, Any]]:
        """Every project, each with at least ``name``, ``type`` and ``description``."""
        rows = self._get(PROJECTS, shape=project_rows)
        return [
            {
                "name": row["name"],
                "type": row.get("type"),
                "description": row.get("description"),
                **row,
            }
            for row in rows
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
        return self._get(ENVIRONMENTS, params, shape=environment_catalogue)

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
        reward_file: Path | bytes | None = None,
        completion: str | None = None,
        on_event: Callable[[StreamEvent], None] | None = None,
    ) -> dict[str, Any]:
        """Submit a training job; returns Arena's acceptance, e.g. ``{"accepted": True, ...}``.

        Resent safely after network failures (see the module docstring); a result with
        ``"recovered": True`` means the first send had worked. With a reward file (a reasoning
        LLM job) the submission is a multipart form: the manifest as a JSON text part, the
        file as the ``reward_file`` part.

        :param manifest: the Arena manifest payload.
        :param resource_id: the resource tier (``None``: Arena decides).
        :param num_nodes: how many nodes (``None``: Arena decides).
        :param project: the project (default: the stored default project).
        :param experiment_name: the experiment's name (default: Arena picks one).
        :param reward_file: the reward module (a ``.py`` path, or its bytes), at most
            :data:`MAX_REWARD_BYTES`.
        :param completion: a completion Arena checks the reward function against (default:
            the first row's reference answer).
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
        if reward_file is None and completion is None:
            request = self._streamed(SUBMIT, ArenaTrainingError, json=body)
        else:
            form, files = _submission_form(body, completion, reward_file)
            request = self._streamed(SUBMIT, ArenaTrainingError, data=form, files=files)
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
        return self._get(EXPERIMENTS, params, shape=object_rows)

    def stop_experiment(self, name: str) -> Any:
        return self._json("POST", STOP, {"experiment_name": name.strip()})

    def resume_experiment(self, name: str, max_steps: int) -> Any:
        return self._json("POST", RESUME, {"experiment_name": name, "max_steps": int(max_steps)})

    def list_checkpoints(self, name: str) -> list[dict[str, Any]]:
        return self._get(CHECKPOINTS, {"experiment_name": name}, shape=object_rows)

    def list_metric_names(self, name: str, project: str | None = None) -> list[str]:
        params = {"experiment_name": name}
        resolved = self._project_or_default(project)
        if resolved:
            params["project"] = resolved
        return self._get(METRICS, params, shape=metric_names)

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
        request = _Request("GET", self._api(METRICS), params=params, max_bytes=wire.MAX_CSV_BYTES)
        response = self._call(request)
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
            text = self._redact(clip(body[:500].decode("utf-8", "replace"))) or "(empty reply)"
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

    def _post_login(
        self, endpoint: str, form: dict[str, str], *, max_retries: int | None = None
    ) -> httpx.Response:
        """POST a form to the login server (no bearer token); the last response."""
        url = self._oidc(endpoint)
        return self._send(_Request("POST", url, data=form, login=True, max_retries=max_retries))

    def _get(
        self, path: str, params: Any = None, *, shape: Callable[[Any], Any] | None = None
    ) -> Any:
        """A GET's reply, checked by ``shape`` (ArenaReplyError when it objects), then scrubbed."""
        request = _Request("GET", self._api(path), params=params)
        reply = _payload(request, self._call(request))
        if shape is not None:
            try:
                reply = shape(reply)
            except ReplyShapeError as error:
                raise ArenaReplyError(
                    self._redact(f"Arena sent an unexpected reply to GET {path}: {error}")
                ) from None
        return self._secrets.scrub(reply)

    def _json(self, method: str, path: str, body: Any) -> Any:
        request = _Request(method, self._api(path), json=body)
        reply = _payload(request, self._call(request))
        return self._secrets.scrub(reply)

    def _streamed(self, path: str, error: type[ArenaAPIError], **body: Any) -> _Request:
        return _Request(
            "POST", self._api(path), error=error, stream=True, timeout=self._stream_timeout, **body
        )

    def _call(self, request: _Request) -> httpx.Response:
        """Send an API request within its budget (refresh and resend after a 401 included); a
        successful response (still open when ``stream``: read it by ``request.body_deadline``)."""
        with wire.deadline(self._budget(request)):
            self._auth.refresh_if_expiring()
            response = self._send(request)
            if response.status_code == 401:
                response.close()
                self._auth.recover_from_401()
                response = self._send(request)
                if response.status_code == 401:
                    response.close()
                    raise self._auth.unauthorized()
        if not response.is_success:
            raise self._http_error(request, response)
        return response

    def _send(self, request: _Request) -> httpx.Response:
        """Send with retries, all within the call's budget; the last response, whatever its
        status."""
        with wire.deadline(self._budget(request)):
            attempt = 0
            while True:
                outcome = self._attempt(request)
                delay, ambiguous = self._retry_plan(request, outcome, attempt)
                delay = self._within_budget(request, outcome, delay)
                if delay is None:
                    if isinstance(outcome, httpx.Response):
                        return outcome
                    raise self._network_error(request, outcome, attempt + 1)
                if isinstance(outcome, httpx.Response):
                    outcome.close()
                self._wait(request, outcome, delay)
                attempt += 1
                if ambiguous and request.before_resend is not None:
                    request.before_resend()

    def _budget(self, request: _Request) -> float:
        """Seconds that all attempts of ``request`` and the waits between them may take."""
        return CALL_BUDGET_TIMEOUTS * self._seconds(request)

    def _within_budget(
        self, request: _Request, outcome: httpx.Response | httpx.RequestError, delay: float | None
    ) -> float | None:
        """``delay`` if waiting that long ends before the budget does, else None (give up);
        when it is the server that asked for the wait, an error saying so is raised instead."""
        left = wire.remaining()
        if delay is None or left is None:
            return delay
        asked = isinstance(outcome, httpx.Response) and _retry_after(outcome) is not None
        if delay < (min(left, MAX_RETRY_AFTER_S) if asked else left):
            return delay
        if asked and isinstance(outcome, httpx.Response):
            raise self._wait_refused(request, outcome, delay, left)
        return None

    def _wait(
        self, request: _Request, outcome: httpx.Response | httpx.RequestError, delay: float
    ) -> None:
        """Sleep before a resend, saying so when the wait is long."""
        reason = self._redact(_reason(outcome))
        log.debug("%s failed (%s); retrying in %.2f s", request.what, reason, delay)
        if delay > NOTICE_AFTER_S:
            if isinstance(outcome, httpx.Response) and _retry_after(outcome) is not None:
                why = f"{self._server(request)} asked to retry {request.what} later ({reason})"
            else:
                why = f"retrying {request.what} after {reason}"
            self._notify(f"waiting {_duration(delay)}: {why}")
        self._sleep(delay)

    def _attempt(self, request: _Request) -> httpx.Response | httpx.RequestError:
        """One send within the attempt's deadline: the response (a successful stream still
        open, any other read), or the network failure."""
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
            with wire.deadline(self._seconds(request)) as end:
                response = self._follow(request, built)
                if request.stream and response.is_success:
                    request.body_deadline = end
                    return response
                return self._read(request, response)
        except httpx.RequestError as error:
            return error

    def _seconds(self, request: _Request) -> float:
        """The deadline of one attempt of ``request``."""
        return self._upload_timeout if request.stream else self._request_timeout

    def _option(self, request: _Request) -> str:
        """The option that sets :meth:`_seconds`."""
        return "--upload-timeout" if request.stream else "--request-timeout"

    def _follow(self, request: _Request, built: httpx.Request) -> httpx.Response:
        """Send ``built``, following redirects that stay on its origin and refusing the others."""
        home = wire.origin(built.url)
        for _ in range(MAX_REDIRECTS + 1):
            response = self._http.send(built, stream=True)
            target = response.next_request
            if target is None:
                return response
            response.close()
            if wire.origin(target.url) != home:
                raise self._redirect_error(request, target.url)
            built = target
        raise ArenaRedirectError(
            f"{self._server(request)} redirected {request.what} more than {MAX_REDIRECTS} times",
            hint=KEYCLOAK_HINT if request.login else None,
        )

    def _read(self, request: _Request, response: httpx.Response) -> httpx.Response:
        """``response`` with its body read: an error's first MiB, else all of it up to the cap."""
        if not response.is_success:
            return wire.read_body(response, wire.MAX_ERROR_BYTES, cut=True)
        try:
            return wire.read_body(response, request.max_bytes or wire.MAX_REPLY_BYTES)
        except wire.TooLarge as error:
            raise ArenaReplyError(
                f"{self._server(request)}'s reply to {request.what} is too large ({error})"
            ) from None

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

    def _server_delay(self, response: httpx.Response, attempt: int) -> float:
        """The wait the server asked for, else the backoff (see :meth:`_within_budget`)."""
        wait = _retry_after(response)
        return self._backoff_delay(attempt) if wait is None else wait

    def _headers(self, request: _Request) -> dict[str, str]:
        headers = dict(request.headers)
        if not request.login:
            headers["Authorization"] = self._auth.authorization()
        return headers

    # -- streams -----------------------------------------------------------------------------

    def _stream_result(
        self, request: _Request, on_event: Callable[[StreamEvent], None] | None
    ) -> dict[str, Any]:
        """Read an NDJSON progress stream, by the deadline of the attempt that opened it; the
        final report, or the first failure raised."""
        response = self._call(request)
        lines: list[str] = []
        try:
            with wire.until(request.body_deadline):
                failure, result = self._read_events(response, lines, on_event)
            if failure is not None:
                raise self._api_error(request.error, failure_body(failure), 0)
            return result if result is not None else self._secrets.scrub(whole_body(lines))
        except (wire.TooLarge, TooDeep, httpx.RequestError) as error:
            raise self._stream_error(request, error) from None
        finally:
            response.close()

    def _read_events(
        self,
        response: httpx.Response,
        lines: list[str],
        on_event: Callable[[StreamEvent], None] | None,
    ) -> tuple[StreamEvent | None, dict[str, Any] | None]:
        """The first failed event and the last report of a stream, its lines kept in ``lines``."""
        failure: StreamEvent | None = None
        result: dict[str, Any] | None = None
        cap = wire.MAX_REPLY_BYTES
        for raw in events(wire.lines(response, min(wire.MAX_LINE_BYTES, cap)), lines, cap):
            event = self._scrub_event(raw)
            if on_event is not None:
                on_event(event)
            if event.error:
                failure = failure or event
            elif event.status == "completed" and event.kind != "check" and event.detail:
                result = event.detail
        return failure, result

    def _stream_error(
        self, request: _Request, error: wire.TooLarge | TooDeep | httpx.RequestError
    ) -> ArenaAPIError:
        """The error for a progress stream that could not be read to its end."""
        if isinstance(error, wire.TooLarge):
            return ArenaReplyError(
                f"Arena's progress stream for {request.what} is too large ({error})"
            )
        if isinstance(error, TooDeep):
            return ArenaReplyError(f"Arena's progress stream for {request.what} {error}")
        host = wire.host_text(httpx.URL(request.url))
        if isinstance(error, httpx.TimeoutException):
            return ArenaNetworkError(
                f"Arena did not finish replying to {request.what} within "
                f"{self._seconds(request):g} s ({host}); it may still have processed the request",
                hint=f"allow more time with {self._option(request)}",
            )
        return ArenaNetworkError(
            f"the connection to {host} dropped before Arena finished replying "
            f"({self._redact(_reason(error))})",
            hint=DROPPED_HINT,
        )

    def _scrub_event(self, event: StreamEvent) -> StreamEvent:
        """``event`` with what it shows scrubbed of credentials."""
        detail = self._secrets.scrub(event.detail) if event.detail is not None else None
        return dataclasses.replace(event, message=self._redact(event.message), detail=detail)

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
        extras = self._secrets.scrub(body.extras)
        return kind(detail, status_code=status, extras=extras, hint=hint)

    def _network_error(
        self, request: _Request, error: httpx.RequestError, attempts: int
    ) -> ArenaNetworkError:
        host = wire.host_text(httpx.URL(request.url))
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        reason = self._redact(_reason(error))
        hint = KEYCLOAK_HINT if request.login else None
        if isinstance(error, _NOT_SENT):
            what = f"could not connect to {host}{tries} ({reason})"
        elif isinstance(error, httpx.TimeoutException):
            what = (
                f"{self._server(request)} did not answer within {self._seconds(request):g} s "
                f"({host}, {request.what}{tries}; {reason})"
            )
            hint = hint or f"try again later, or allow more time with {self._option(request)}"
        else:
            what = f"the connection to {host} failed{tries} ({reason})"
        return ArenaNetworkError(what, hint=hint)

    def _wait_refused(
        self, request: _Request, response: httpx.Response, wait: float, left: float
    ) -> ArenaAPIError:
        """The error for a reply asking for a wait that would outlast the call's budget."""
        error = self._http_error(request, response)
        advice = "try again later"
        if wait <= MAX_RETRY_AFTER_S:
            advice += (
                f", or allow more time with {self._option(request)}: a request and its retries "
                f"may take {CALL_BUDGET_TIMEOUTS} times it"
            )
        error.hint = (
            f"{self._server(request)} asked to wait {_duration(wait)} before retrying, longer "
            f"than the {_duration(left)} this request has left; {advice}"
        )
        return error

    def _redirect_error(self, request: _Request, target: httpx.URL) -> ArenaRedirectError:
        here, there = wire.host_text(httpx.URL(request.url)), wire.host_text(target)
        return ArenaRedirectError(
            f"{self._server(request)} redirected {request.what} to {target.scheme}://{there}, "
            f"another origin; not followed, so no credential leaves {here}",
            hint=KEYCLOAK_HINT if request.login else None,
        )

    @staticmethod
    def _server(request: _Request) -> str:
        return "Arena's login server" if request.login else "Arena"

    def _redact(self, value: Any) -> Any:
        """``value`` with every credential this client knows replaced by ``[redacted]``."""
        return self._secrets.redact(value)

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


# -- wire format ---------------------------------------------------------------------------------


def _payload(request: _Request, response: httpx.Response) -> Any:
    """A 2xx reply's content: JSON (unwrapped from ``{"ok": true, "data": ...}``) or text."""
    if not response.headers.get("content-type", "").lower().startswith("application/json"):
        return response.text
    try:
        value = load_json(response.content)
    except ValueError:
        return response.text
    except TooDeep as error:
        raise ArenaReplyError(f"Arena's reply to {request.what} {error}") from None
    if isinstance(value, dict) and value.get("ok") is True and "data" in value:
        return value["data"]
    return value


def _to_stderr(text: str) -> None:
    print(printable(text), file=sys.stderr)


def _duration(seconds: float) -> str:
    """``seconds`` as ``1.5 s`` or ``119 s``."""
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


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


def _submission_form(
    body: dict[str, Any], completion: str | None, reward_file: Path | bytes | None
) -> tuple[dict[str, str], Callable[[], dict[str, Any]] | None]:
    """The multipart form of a submission: text parts (None left out) and the file part."""
    fields = {**body, "manifest": json.dumps(body["manifest"], separators=(",", ":"))}
    fields["completion"] = completion
    form = {key: str(value) for key, value in fields.items() if value is not None}
    if reward_file is None:
        return form, None
    name, content = _reward_content(reward_file)
    return form, lambda: {"reward_file": (name, content, "text/x-python")}


def _reward_content(reward_file: Path | bytes) -> tuple[str, bytes]:
    """The reward file's name and bytes, read once (a resend sends the same bytes)."""
    if isinstance(reward_file, bytes):
        content, name = reward_file, "reward.py"
    else:
        path = Path(reward_file)
        if path.suffix != ".py":
            raise ArenaConfigError(f"Reward file {path} is not a .py file")
        try:
            with path.open("rb") as stream:
                content = stream.read(MAX_REWARD_BYTES + 1)
        except OSError as error:
            raise ArenaConfigError(
                f"Could not read the reward file {path}: {error.strerror or error}"
            ) from None
        name = path.name
    if len(content) > MAX_REWARD_BYTES:
        raise ArenaConfigError(
            f"Reward file {name} is over {MAX_REWARD_BYTES:,} bytes",
            "keep the reward function in a small module",
        )
    return name, content


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


def _flag(value: bool) -> str:
    return "true" if value else "false"
