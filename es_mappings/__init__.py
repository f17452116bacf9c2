"""Elasticsearch index templates (JSON), shipped as package data."""
