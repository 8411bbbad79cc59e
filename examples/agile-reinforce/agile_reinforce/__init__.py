"""agile-reinforce: REINFORCE with a learned baseline, as an agile plugin."""

__version__ = "0.1.0"
