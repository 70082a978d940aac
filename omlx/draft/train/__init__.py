"""Training DFlash drafts (`omlx draft train`).

prompts.py reads the shipped prompt set (prompts.jsonl, made by prompt_templates.py) or
a user's; data.py has the target write its replies (self-distillation, cached);
sizing.py picks the draft's shape; objective.py is the block loss; trainer.py the
optimisation loop with evaluation and checkpoints; run.py ties them together.
"""
