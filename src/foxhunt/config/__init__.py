"""The configuration machinery: the frozen base model, the root model that composes every stage's
section (each in ``<stage>/config.py``; docs/design.md §9), the TOML profiles and their loader."""
