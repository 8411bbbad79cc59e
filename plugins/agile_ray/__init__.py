"""First-party plugin: the ``ray`` backend (train a population's members on a Ray cluster).

``import ray`` happens only when this backend trains: registering it costs nothing.
"""

from agile_ray.trainer import RayTrainer

__all__ = ["RayTrainer"]
