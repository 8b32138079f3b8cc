"""Judgement: each module holds the checks of one category; each check turns facts into findings."""
