"""Work beside the main thread: background threads and a pool of processes."""
