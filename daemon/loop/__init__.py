"""The daemon loop: the driver state machine, pure phase logic, and the ports it drives."""
