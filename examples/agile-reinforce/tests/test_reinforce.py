"""The plugin's own tests, written with agile's testing kit (installed with agile)."""

from __future__ import annotations

import numpy as np


def test_conforms(agile_conformance) -> None:
    agile_conformance("REINFORCE")


def test_trains_and_evolves(agile_smoke_train) -> None:
    result = agile_smoke_train("REINFORCE")
    assert result.summary["generations"] == 2
    assert all(np.isfinite(result.fitnesses))


def test_validation_names_the_field(agile_cli, tmp_path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "algorithm: {name: REINFORCE, gama: 0.9}\nenvironment: {name: CartPole-v1}\n"
    )
    result = agile_cli("validate", str(manifest))
    assert result.exit_code == 2
    assert "algorithm.gama: unknown field (did you mean 'gamma'?)" in result.output


def test_greedy_actions_are_valid(agile_population) -> None:
    member = agile_population("REINFORCE", size=1)[0]
    actions = member.act(np.zeros((3, 4), np.float32), explore=False)
    assert actions.shape == (3,) and set(actions) <= {0, 1}
