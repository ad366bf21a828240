"""The HTTP surface: queue API, status, metrics and the dashboard."""
