"""analyses/benchmarks/: speed, memory and error of the engine (numbers depend on the machine)."""
