"""shipyard steps: one folder per step (logic, thin KFP wrapper, README)."""
