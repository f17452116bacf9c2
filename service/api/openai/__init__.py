"""The OpenAI-compatible wing: ``/v1/chat/completions`` and ``/v1/models`` over the one ``ask`` use case,
with OpenAI's request, response, stream and error shapes."""
