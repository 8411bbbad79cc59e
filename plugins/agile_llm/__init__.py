"""First-party plugin (in progress): LLM fine-tuning. Today: ``agile llm tiny-model``, a small
local causal LM to try the LLM stack offline, and populations of LoRA adapters over one frozen
base model. Needs the ``llm`` extra (``pip install -e ".[llm]"``)."""
