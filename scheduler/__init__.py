"""scheduler: the deadline table — claim due rows, fire them, settle failures."""

from dormant.scheduler.deadlines import Claim, ClaimKind, FireOutcome, FireStatus, claim_due, fire

__all__ = ["Claim", "ClaimKind", "FireOutcome", "FireStatus", "claim_due", "fire"]
