"""Container recipes: ``tenter container dockerfile`` writes the EFA training image."""

from tenter.container.dockerfile import Recipe, RecipeError, render, resolve, versions_table

__all__ = ["Recipe", "RecipeError", "render", "resolve", "versions_table"]
