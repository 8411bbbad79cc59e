"""Training starts without loading torch's compiler stack, and building a network draws
nothing from torch's global generator."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch import nn

from agile_rl.nn.eager import uninitialised

BUILD_AND_STEP = """
import sys
from agile_cli.testing import tiny_manifest, tiny_population
members = tiny_population(tiny_manifest("DQN", algorithm_options={"double": True}), size=2)
member = members[0]
state = member.optimizers["q"].state_dict()
member.optimizers["q"].zero_grad()
print("LOADED:", ",".join(sorted({"torch._dynamo", "sympy"} & set(sys.modules))))
"""


def test_building_members_and_their_optimizers_loads_no_compiler_machinery() -> None:
    """torch._dynamo (0.9 s) and sympy (0.4 s) used to load before the first env step."""
    done = subprocess.run(
        [sys.executable, "-c", BUILD_AND_STEP], capture_output=True, text=True, check=True
    )
    assert "LOADED: \n" in done.stdout, done.stdout + done.stderr


def test_uninitialised_layers_draw_nothing_and_are_the_class_asked_for() -> None:
    state = torch.get_rng_state()
    layers = [
        uninitialised(nn.Linear, 3, 5),
        uninitialised(nn.Conv2d, 2, 4, 3, stride=2),
        uninitialised(nn.LSTM, 3, 8, 2),
    ]
    assert torch.equal(torch.get_rng_state(), state)
    assert [type(layer) for layer in layers] == [nn.Linear, nn.Conv2d, nn.LSTM]
    assert layers[0].weight.shape == (5, 3) and layers[1].weight.shape == (4, 2, 3, 3)
    assert layers[2](torch.zeros(1, 4, 3))[0].shape == (1, 4, 8)
    for layer in layers:  # they still initialise as their class does when asked
        layer.reset_parameters()
