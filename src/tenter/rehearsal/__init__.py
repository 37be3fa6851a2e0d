"""``tenter rehearse``: a job's real control plane at scale on one machine (docs/scale.md)."""
