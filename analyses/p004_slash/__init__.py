"""analyses/p004_slash/: paper 004: slash-dominant heads, band ablations, InP, the embedding cone, OOD."""
