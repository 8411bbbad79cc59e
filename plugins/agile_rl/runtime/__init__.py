"""The algorithm runtime: members (:mod:`.agent`, :mod:`.multi_agent`), the experience they
learn from (:mod:`.buffers`, :mod:`.rollout`), environments seen by them (:mod:`.gym_vector`,
:mod:`.team_env`) and shared algorithm building blocks (:mod:`.algorithms`). Imports torch."""
