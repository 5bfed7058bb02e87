"""The agent (docs/design.md §6): network parts, distributional maths, replay, exploration and the learner."""
