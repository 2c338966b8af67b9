"""Test servers and doubles (Kubernetes API double, local OCI registry, service launcher, tiny model).

They ship in the wheel because `shipyard run --local --runner container` (the container rehearsal)
starts them; no product step imports them."""
