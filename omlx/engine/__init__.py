"""The text request path: one engine per loaded text model, its loop, batching and sampling."""
