"""Step kinds: one kind per module, each a parameter model plus check → apply → verify (see base.py)."""
