"""analyses/atlas/: the head atlas and the zoo: roles, retrieval heads, massive values, attention shape."""
