"""The local services the command line starts on this machine — an Elasticsearch node or cluster from the
integ-test zips (:mod:`.esnode`, :mod:`.escluster`) and the llama.cpp server (:mod:`.llm_server`) — through
one way of running background processes (:mod:`.process`). ``service/`` never starts processes."""
