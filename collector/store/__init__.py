"""Talking to a Prometheus-compatible store: settings, transport, answers, raw reads."""
