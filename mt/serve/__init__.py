"""`mt serve`: the HTTP API and web page in front of one model."""
