"""First-party plugin: multi-frequency population-based training (MF-PBT).

Adds ``selection_strategy.strategy: multi_frequency`` (Doulazmi et al., "Multiple-Frequencies
Population-Based Training", 2025). The population is split into subpopulations that evolve
at different frequencies; slow ones keep what greedy, frequent selection would throw away, and
strong members migrate between them. The core knows it only as a registered strategy.
"""
