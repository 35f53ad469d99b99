"""The session report: one page per session, its numbers, advice and comparison."""
