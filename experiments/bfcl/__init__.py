"""BFCL validation of strict tool calls under Qwen XML framing, per drafter (see run.py)."""
