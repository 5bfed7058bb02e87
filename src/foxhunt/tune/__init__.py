"""Hyperparameter search (``foxhunt tune``): an Optuna study over a ``[tune]`` space of the config.

:mod:`~foxhunt.tune.config` the section, :mod:`~foxhunt.tune.space` the space applied as ``--set``,
:mod:`~foxhunt.tune.study` the study and a trial's objective, :mod:`~foxhunt.tune.export` the best
trial as a profile, :mod:`~foxhunt.tune.report` the report. Only the first two are imported by the
config; Optuna is imported by the others.
"""
