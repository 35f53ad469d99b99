"""Pictures of an export: a page per worker and one of the cluster."""
