"""The model's parts: the estimator factory (MLlib or spark-rapids-ml), the metrics, the split."""
