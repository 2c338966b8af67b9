"""The gates: accuracy, SLO, champion/challenger, and the selection among candidates."""
