"""Labelling tasks with the solver: the spot-check (k attempts → pass rate → in band or not, false
positives) and active/sequential labelling (which tasks to spot-check, when a label is settled)."""
