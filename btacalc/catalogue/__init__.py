"""The symbolic formula catalogue (``formulas/*.toml``): terms, selections and their compiled sums.

Submodules: `terms` (phases and terms as data), `selection` (which terms apply), `compiled`
(numeric functions), `constants` (named pass and collective factors), `symbols` (sympy notation).
Importing this package does not import sympy; its submodules do (except `constants`).
"""
