"""The studies above one training run: hyperparameter search (``foxhunt tune``, an Optuna study over a
``[tune]`` space of the config) and the multi-seed study (``foxhunt seeds``).

:mod:`~foxhunt.tune.config` the section, :mod:`~foxhunt.tune.space` the space and its check,
:mod:`~foxhunt.tune.study` the study and a trial's objective, :mod:`~foxhunt.tune.export` the best
trial as a profile, :mod:`~foxhunt.tune.report` the report, :mod:`~foxhunt.tune.seeds` one config
trained under several seeds. Only the section is imported by the config; Optuna is imported by the
study.
"""
