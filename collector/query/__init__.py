"""What is asked of a store, in parts it answers: PromQL, batches, chunks, refusals."""
