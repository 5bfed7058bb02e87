"""Typed, frozen configuration models and TOML profiles."""
