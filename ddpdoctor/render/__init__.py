"""Renderers take a finished Report and never run checks."""
