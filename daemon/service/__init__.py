"""Wiring of a running service: engine, leader lease, spot-check and retrain adapters, lifecycle."""
