"""Small user-style eval sets of each form (made for shipyard from the offline suite's facts) and the
pairwise judge prompt: what the local run evaluates with ``eval_sets`` and what the README shows."""
