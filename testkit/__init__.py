"""What tests and benchmarks share: real servers on free ports, the fake-engine driver, tiny
references, daemon configs, the queue and soak measurements. Neither imports the other; both import this."""
