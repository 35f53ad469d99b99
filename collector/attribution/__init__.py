"""Where GPU time went, pure: per job, DAG, task prefix and activity."""
