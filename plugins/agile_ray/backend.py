"""The ray backend: the evolutionary loop and the run folder here, the members' training in
Ray workers (on this machine's own Ray instance, or on a cluster)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from agile_cli import Backend, RunResult, Spec, TrainingManifest, UsageError
from agile_cli.helpers import Registry, RunnerFactory, resume_local, run_local
from agile_ray.spec import RayOptions


class RayBackend(Backend):
    """Trains each slot of the population in a Ray worker; evaluation results, selection,
    mutation, checkpoints and the run folder stay with the driver (this process), as the
    local backend has them, so either backend resumes the other's runs."""

    def train(
        self, manifest: TrainingManifest, options: Spec, registry: Registry, *, verbose: bool
    ) -> RunResult:
        spec = _checked(options)
        _check_sharing(spec, manifest)  # before Ray starts
        with _workers(_Settings(spec)) as factory:
            result = run_local(manifest, registry, _driver(spec), verbose=verbose, runner=factory)
        return result

    def resume(
        self, run_dir: Path, options: Spec, registry: Registry, *, verbose: bool
    ) -> RunResult:
        spec = _checked(options)
        settings = _Settings(spec)
        with _workers(settings) as factory:
            result = resume_local(
                run_dir, registry, _driver(spec), verbose=verbose, runner=factory,
                adopt=settings.adopt,
            )  # fmt: skip
        return result


class _Settings:
    """The run's options as the workers' runner is made with them: a resumed run's are the
    ones it started with where the resume command does not give them anew."""

    def __init__(self, spec: RayOptions) -> None:
        self.spec = spec

    def adopt(self, options: Any) -> None:
        """Take the run-shaping options the run resumes with (not the driver's device)."""
        kept = {name: getattr(options, name) for name in RayOptions.shaping}
        self.spec = self.spec.model_copy(update=kept)


def _checked(options: Spec) -> RayOptions:
    spec = cast(RayOptions, options)  # the CLI validated them against RayOptions
    if spec.checkpoint_buffer:
        raise UsageError(
            "--checkpoint-buffer: the ray backend keeps replay buffers in its workers, and "
            "checkpoints hold the members only",
            "drop it (a resumed run refills its buffers), or train with --backend local",
        )
    _check_sharing(spec, None)
    return spec


def _check_sharing(spec: RayOptions, manifest: TrainingManifest | None) -> None:
    """``--share-experience`` needs synchronous generations, and a replay buffer (checked
    where the ``manifest`` is known; a resumed run's options are known only once its
    checkpoint is read: its runner's factory checks them again)."""
    if spec.share_experience and spec.asynchronous:
        raise UsageError(
            "--share-experience is for synchronous generations, not with --async",
            "drop one of them",
        )
    if spec.share_experience and manifest is not None and manifest.replay_buffer is None:
        raise UsageError(
            f"--share-experience: {manifest.algorithm_name} keeps no replay buffer to share "
            "(it learns from its own rollouts)",
            "drop --share-experience",
        )


def _driver(spec: RayOptions) -> RayOptions:
    """The loop's options: the driver's copies of the members stay on its CPU (the workers
    train on --device)."""
    return spec.model_copy(update={"device": "cpu"})


@contextmanager
def _workers(settings: _Settings) -> Iterator[RunnerFactory]:
    """A runner factory for the loop, with Ray connected until the run ends (its workers are
    stopped then)."""
    from agile_ray.cluster import connected

    made: list[Any] = []
    with connected(settings.spec.address) as ray:
        try:
            yield _factory(ray, settings, made.append)
        finally:
            for runner in made:
                runner.close()


def _factory(ray: Any, settings: _Settings, keep: Callable[[Any], None]) -> RunnerFactory:
    from agile_ray.asynchronous import AsyncRayRunner
    from agile_ray.cluster import cluster_cpus, plan
    from agile_ray.runner import RayRunner

    def make(manifest: TrainingManifest, seed: int, note: Callable[[str], None]) -> RayRunner:
        spec = settings.spec
        _check_sharing(spec, manifest)
        layout = plan(
            manifest.training.pop_size,
            cluster_cpus(ray),
            cpus_per_member=spec.cpus_per_member,
            gpus_per_member=spec.gpus_per_member,
            members_per_worker=spec.members_per_worker,
        )
        note(layout.describe())
        options = {"device": spec.device, "per_member": spec.per_member}
        shared: dict[str, Any] = {
            "note": note,
            "timeout": spec.worker_timeout,
            "checkpoint_every": spec.checkpoint_every,
            "member_timeout": spec.member_timeout,
            "share_experience": spec.share_experience,
        }
        if spec.asynchronous:
            runner: RayRunner = AsyncRayRunner(
                ray, manifest, seed, layout, options, max_staleness=spec.max_staleness, **shared
            )
        else:
            runner = RayRunner(ray, manifest, seed, layout, options, **shared)  # fmt: skip
        keep(runner)
        return runner

    return make
