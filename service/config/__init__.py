"""The one settings object (:mod:`.settings`, the only reader of the environment) and the checks of
setting names and values for a person (:mod:`.names`).

May import only ``errors`` and ``types``: every other layer imports this one.
"""
