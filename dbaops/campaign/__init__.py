"""Campaigns: scenarios × agents × seeds × repeats, run from a manifest that survives
interruption (``dbaops campaign SPEC.yaml --out DIR [--workers N] [--resume]``)."""

from dbaops.campaign.executor import run_campaign
from dbaops.campaign.manifest import Manifest, PlannedRun, plan
from dbaops.campaign.spec import CampaignSpec, load_campaign_spec

__all__ = ["CampaignSpec", "Manifest", "PlannedRun", "load_campaign_spec", "plan", "run_campaign"]
