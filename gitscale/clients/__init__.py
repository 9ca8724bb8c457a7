"""The clients of the outside systems gitscale speaks to over HTTP: one module per system.

``http.py`` is the one HTTP client (timeouts, retries, ``Link`` paging, rate limits, errors that
name the URL and the cause, never a credential), with ``etags.py`` (conditional GETs, their
cache in memory or on disk), ``answers.py`` (an answer: its JSON, the API's words, the rate
limit it states), ``urls.py`` (origins, where a credential may follow, ``Link`` paging) and
``no_answer.py`` (why there was no answer); ``github.py`` and
``github_app.py`` speak GitHub's REST API (token or App), ``buildkite.py`` Buildkite's agent
metrics API and its REST API. ``errors.py`` holds their errors and imports no HTTP library, so
a caller can name them without loading one. The callers (the demand sources, ``serve``'s
resync, the controller's platforms) turn these errors into theirs at their boundary.
"""
