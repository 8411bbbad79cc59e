"""Building blocks that several algorithms share: base classes for families of algorithms and
the pieces of their updates. Plugins import them from ``agile_cli``."""
