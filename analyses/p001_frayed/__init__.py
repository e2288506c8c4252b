"""analyses/p001_frayed/: paper 001: frayed RoPE, rank-one clouds, geometry against length, RoPE-ID."""
