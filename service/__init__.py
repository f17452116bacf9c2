"""hopsearch.service: the core (Elasticsearch store, retrieval, models, strategies). Imports nothing
from ``hopsearch.loaders`` or ``hopsearch.cli``."""
