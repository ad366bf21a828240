"""Operations: alert rules, evaluation and sinks; Prometheus metrics; alert replay."""
