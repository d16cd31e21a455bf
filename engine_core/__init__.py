"""dormant's pure core: the BPMN semantics, with no I/O, clock or environment.

Everything an instance is and does is decided here, as a function of
(definition, checkpoint, trigger, now); the packages above only store, lock, route
and carry what this package returns.
"""
