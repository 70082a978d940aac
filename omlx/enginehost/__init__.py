"""The engine process: models and engines in a child, the HTTP front end in `omlx serve`."""
