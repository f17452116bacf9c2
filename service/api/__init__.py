"""The plugin-style HTTP service: Elasticsearch's dialect over the retriever and the strategies.

Build the ASGI app with :func:`create_app`; ``hopsearch serve`` runs it under uvicorn.
"""

from hopsearch.service.api.app import create_app

__all__ = ["create_app"]
