"""hopsearch.loaders: parse, chunk and embed sources, then bulk them into Elasticsearch."""
