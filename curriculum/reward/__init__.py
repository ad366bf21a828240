"""The generator's reward: probe score, validity and spot-check terms (:mod:`.rewards`), the novelty
(diversity) term (:mod:`.novelty`) and the diversity measures it and the evaluation share (:mod:`.diversity`)."""
