"""The agent (SPEC §7): network parts, distributional maths, replay, exploration and the learner."""
