"""Runnable configs that reproduce the seed studies (see README.md in this folder)."""
