"""Alpha check: do the cached features predict the direction of the next move (MLP and LightGBM over purged walk-forward folds)?"""  # noqa: E501
