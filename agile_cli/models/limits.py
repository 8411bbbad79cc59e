"""Upper bounds of the schema.

A value past one of these is surely a mistake (a population of a million, a layer a million
wide, a 1e18 step budget) that would grind for hours or try to allocate far more memory than
any machine has before failing. They are generous: no real run comes near them. Each field's
description states its bound, so ``agile schema`` shows it.
"""

from __future__ import annotations

#: training.pop_size
POPULATION = 1024
#: training.max_steps, evo_steps, learning_delay and the other step counts
STEPS = 10**12
#: environment.num_envs
ENVIRONMENTS = 4096
#: training.eval_loop
EVALUATION_EPISODES = 1000
#: training.eval_steps, episode_steps: steps of one episode
EPISODE_STEPS = 10**8
#: iterations and epochs (LLM finetuning, PPO update epochs)
ITERATIONS = 10**6
#: layer widths, latent dimensions, LSTM hidden states
WIDTH = 65_536
#: hidden layers, blocks, LSTM layers, convolutions
LAYERS = 64
#: CNN channels of one layer
CHANNELS = 8192
#: CNN kernel sizes and strides
KERNEL = 1024
#: replay_buffer.max_size
BUFFER = 10**9
#: n-step returns
N_STEP = 1000
#: PPO's update epochs
EPOCHS = 10_000
#: batch sizes
BATCH = 2**20
#: learn_step: environment steps per rollout or between gradient steps
ROLLOUT = 10**7
#: recipe.schedule: generations of one recipe
GENERATIONS = 100_000
