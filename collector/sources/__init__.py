"""What a range holds, read from the store: cluster, workers, sessions, summaries."""
