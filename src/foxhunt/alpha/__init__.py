"""Alpha check: do the cached features predict the direction of the next move (MLP, LightGBM and a screened linear model over purged walk-forward folds)?"""  # noqa: E501
