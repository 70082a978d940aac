"""Route modules; each exposes `ROUTES`, registered in omlx/server/app.py."""
