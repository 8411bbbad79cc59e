"""Developer sessions: `nox` runs lint and tests; `nox -s benchmark` measures cold start."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True

# The torch the tests run with, installed first (as the README's commands do): where pip is
# set up with a local CPU wheel of it, that build; elsewhere, PyPI's (CUDA on x86-64 Linux).
TORCH = "torch==2.13.0"


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Run the test suite (pass pytest arguments after --)."""
    _pytest(session, *session.posargs)


@nox.session(python="3.11")
def slow(session: nox.Session) -> None:
    """The tests the default run leaves out (minutes of Ray cluster runs and faults)."""
    _pytest(session, "-m", "slow", *session.posargs)  # pytest's last -m wins over addopts'


def _pytest(session: nox.Session, *args: str) -> None:
    session.install(TORCH)
    session.install("-e", ".[test]")
    for example in ("agile-reinforce", "agile-gridworld", "agile-runs"):
        session.install("-e", f"examples/{example}")
    session.run("pytest", *args, env={"WANDB_MODE": "disabled"})


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    """mypy over the core and the first-party plugins (with torch installed, for its types)."""
    session.install(TORCH)
    session.install("-e", ".[test]")
    session.run("mypy", "agile_cli", "plugins")


@nox.session(python="3.11")
def benchmark(session: nox.Session) -> None:
    """Cold-start benchmark of `agile validate` (more under benchmarks/)."""
    session.install(TORCH)
    session.install("-e", ".")
    session.run("python", "benchmarks/validate_cold_start.py", *session.posargs)
