"""The small digits task the LLM tests train on (each digit plus one), its reward file and the
adapters' LoRA settings, shared by the LLM test modules and their fixtures in conftest.py."""

ROWS = [
    {"question": q, "answer": a, "prompt": q + "=", "chosen": a, "rejected": q}
    for q, a in (("12", "23"), ("45", "56"), ("70", "81"), ("39", "40"), ("88", "99"),
                 ("05", "16"), ("61", "72"), ("27", "38"), ("93", "04"), ("54", "65"))
]  # fmt: skip

LORA = {"lora_r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}

REWARD = """
def exact(completion, answer, question):
    return 1.0 if completion.strip() == answer else 0.0
"""
