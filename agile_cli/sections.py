"""Where the RL library's manifest sections went: the ``network`` and ``replay_buffer``
specs belong to the RL library, and plugins import them from :mod:`agile_rl`."""

raise ImportError(
    "agile_cli.sections is gone: import NetworkSpec, StochasticNetworkSpec, ReplayBufferSpec "
    "and the encoder configs from agile_rl (e.g. from agile_rl import NetworkSpec)"
)
