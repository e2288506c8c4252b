"""analyses/effects/: causal head effects: what each head does when removed."""
