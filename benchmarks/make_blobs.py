"""Write the example classification table for the bandit manifests: four Gaussian blobs.

Deterministic (seed 0): ``python benchmarks/make_blobs.py`` rewrites the same files,
``configs/data/blobs_features.csv`` (4 columns, header) and ``configs/data/blobs_targets.csv``
(string labels, header).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROWS_PER_CLASS = 100
CLASSES = ("amber", "blue", "coral", "dune")


def main(folder: Path = Path("configs/data")) -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(0.0, 2.0, size=(len(CLASSES), 4))
    features = np.concatenate([c + rng.normal(0.0, 1.0, (ROWS_PER_CLASS, 4)) for c in centres])
    labels = np.repeat(np.array(CLASSES), ROWS_PER_CLASS)
    order = rng.permutation(len(labels))
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "blobs_features.csv").open("w") as file:
        file.write("x1,x2,x3,x4\n")
        file.writelines(",".join(f"{v:.4f}" for v in row) + "\n" for row in features[order])
    with (folder / "blobs_targets.csv").open("w") as file:
        file.write("label\n")
        file.writelines(f"{label}\n" for label in labels[order])


if __name__ == "__main__":
    main()
