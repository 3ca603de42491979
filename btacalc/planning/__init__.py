"""Questions users ask, answered as data: plan, compare, crossover, sweep, validate, formula listings."""
