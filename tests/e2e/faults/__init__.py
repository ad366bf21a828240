"""Fault injection against private PostgreSQL/Redis instances this suite starts and tears down."""
