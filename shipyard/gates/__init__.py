"""Gate rules: accuracy recovery, SLO, safety, the candidate record, champion selection, champion/challenger, the verification's settings and report (the steps that run them: shipyard.steps)."""
