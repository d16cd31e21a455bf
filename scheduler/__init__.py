"""scheduler: the deadline table — claim due rows, fire them, settle failures."""

from scheduler.deadlines import Claim, FireOutcome, claim_due, fire

__all__ = ["Claim", "FireOutcome", "claim_due", "fire"]
