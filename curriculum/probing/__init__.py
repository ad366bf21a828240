"""The probe's lifecycle: the first probe, aux-probe co-evolution and retraining, and the held-out
evaluation of a generator against its probe (see ``docs/PROBES.md`` and ``docs/RL.md``)."""
